"""The Tasks page's "finished" list: a queue's recently finished tasks, newest first,
read from their task records through the queue's finished index.

The index (`keys.finished_key`, written with each final record in the acker's batch)
holds ids scored by finish time; a page reads a batch of ids from a score cursor and the
records of those ids (`FinishedIndex.page`), never the whole index, and at most
`SCAN` ids per page when a status filter skips most of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_taskrunner.admin.task_facts import dotted_name, duration, moment_text
from django_taskrunner.core.records import records
from django_taskrunner.store.finished import FinishedIndex, FinishedRow

OUTCOMES = ("succeeded", "failed", "cancelled", "expired")
PER_PAGE = 50
SCAN = 2000  # index ids one page reads at most (a filter that matches few of them)


@dataclass(frozen=True)
class FinishedTask:
    """One row of the finished list."""

    task_id: str
    status: str
    task_name: str
    queue: str
    finished_ms: int
    started_ms: int | None
    attempt: str
    worker: str
    error: str

    @property
    def finished(self) -> str:
        return moment_text(self.finished_ms)

    @property
    def task_name_html(self) -> str:
        """The task name, escaped, wrapping after its dots (see `dotted_name`)."""
        return dotted_name(self.task_name)

    @property
    def duration(self) -> str:
        """Run time of the last attempt (none for a task that never started)."""
        if self.started_ms is None or self.started_ms > self.finished_ms:
            return ""
        return duration(self.finished_ms - self.started_ms)


@dataclass(frozen=True)
class FinishedList:
    """A page of finished tasks, the cursor of the next one ("" at the end), and how
    many ids were read for it (`stopped`: SCAN reached before the page filled)."""

    rows: list[FinishedTask]
    next_cursor: str
    scanned: int
    stopped: bool


def finished_index() -> FinishedIndex:
    """The finished indexes of the app's Redis and prefix."""
    store = records()
    return FinishedIndex(store.client, store.prefix)


def outcome_filter(value: str) -> str:
    """The status filter of a request: one of OUTCOMES, or "" for all of them."""
    return value if value in OUTCOMES else ""


def finished_page(queue: str, *, cursor: str = "", outcome: str = "",
                  size: int = PER_PAGE) -> FinishedList:
    """One page of `queue`'s finished tasks from `cursor`, of one outcome or all."""
    statuses = frozenset([outcome] if outcome in OUTCOMES else OUTCOMES)
    page = finished_index().page(queue, cursor[:40], size, statuses, SCAN)
    rows = [_row(queue, row) for row in page.rows]
    return FinishedList(rows, page.next_cursor, page.scanned,
                        stopped=bool(page.next_cursor) and len(rows) < size)


def finished_count(queue: str) -> int:
    """How many ids `queue`'s finished index holds (some may have expired since)."""
    return finished_index().count(queue)


def _row(queue: str, row: FinishedRow) -> FinishedTask:
    fields = row.fields
    started = fields.get("st", "")
    return FinishedTask(
        task_id=row.task_id, status=fields.get("s", ""), task_name=fields.get("t", ""),
        queue=fields.get("q", queue), finished_ms=row.finished_ms,
        started_ms=int(started) if started.isdigit() else None,
        attempt=fields.get("a", ""), worker=fields.get("w", ""), error=fields.get("e", ""))
