"""The admin's lists of tasks: pages of queued and running tasks read from a stream.

Nothing here reads a whole stream. A page of queued tasks is one XRANGE (or XREVRANGE)
from a cursor, a page of running ones one XPENDING from a cursor; a search by task name
or id walks at most `SEARCH_SCAN` entries per page and says where it stopped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django_taskrunner.admin.task_facts import (
    body_text,
    decode,
    duration,
    moment_text,
    stream_id_after,
)
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.store.browse import STREAM_ID, Held, StreamBrowser, StreamEntry

PER_PAGE = 50
SEARCH_SCAN = 5000  # stream entries a search page walks at most
PAYLOAD_PREVIEW = 300  # characters of payload shown per row of a list


@dataclass(frozen=True)
class TaskRow:
    """One row of the Tasks list."""

    queue: str  # the stream: a queue or one of its shards
    stream_id: str
    message: TaskMessage | None
    body: bytes | None
    consumer: str = ""
    idle_ms: int | None = None
    deliveries: int | None = None

    @property
    def task_name(self) -> str:
        return self.message.task_name if self.message else "(undecodable message)"

    @property
    def message_id(self) -> str:
        return self.message.id if self.message else ""

    @property
    def dispatched(self) -> str:
        return moment_text(self.message.dispatched_at_ms) if self.message else ""

    @property
    def idle(self) -> str:
        return duration(self.idle_ms)

    @property
    def preview(self) -> str:
        text_ = json.dumps(self.message.payload, ensure_ascii=False, sort_keys=True) if (
            self.message) else body_text(self.body)
        return text_ if len(text_) <= PAYLOAD_PREVIEW else text_[:PAYLOAD_PREVIEW] + "..."


@dataclass(frozen=True)
class RowPage:
    """One page of rows; the cursors of the pages around it ("" for none)."""

    rows: list[TaskRow]
    next_cursor: str = ""
    previous_cursor: str = ""
    scanned: int = 0  # entries a search walked for this page
    search_stopped: bool = False  # the search hit SEARCH_SCAN before filling the page


def matches(message: TaskMessage | None, stream_id: str, needle: str) -> bool:
    """A search hit: the text is in the task name (any case), or is the message or stream id."""
    if message is None:
        return needle == stream_id
    return (needle.lower() in message.task_name.lower() or needle == message.id
            or needle == stream_id)


def queued_page(browser: StreamBrowser, queue: str, *, after: str = "", before: str = "",
                query: str = "", size: int = PER_PAGE) -> RowPage:
    """Waiting (undelivered) messages of one stream, oldest first, from a cursor."""
    floor = browser.group_state(queue).last_delivered
    if before and not query:
        entries = browser.waiting_before(queue, before, floor, size + 1)
        more_before = len(entries) > size
        entries = entries[-size:]
        rows = [_queued(queue, entry) for entry in entries]
        return RowPage(rows, next_cursor=rows[-1].stream_id if rows else "",
                       previous_cursor=rows[0].stream_id if rows and more_before else "")
    start = after if after and stream_id_after(after, floor) else floor
    if not query:
        entries = browser.waiting_after(queue, start, size + 1)
        rows = [_queued(queue, entry) for entry in entries[:size]]
        return RowPage(rows, next_cursor=rows[-1].stream_id if len(entries) > size else "",
                       previous_cursor=rows[0].stream_id if rows and after else "")
    return _search(browser, queue, start, query, size)


def _search(browser: StreamBrowser, queue: str, start: str, query: str, size: int) -> RowPage:
    rows: list[TaskRow] = []
    scanned = 0
    cursor = start
    exhausted = False
    while len(rows) < size and scanned < SEARCH_SCAN:
        entries = browser.waiting_after(queue, cursor, 500)
        if not entries:
            exhausted = True
            break
        for entry in entries:
            scanned += 1
            cursor = entry.stream_id
            message = decode(entry.body)
            if matches(message, entry.stream_id, query):
                rows.append(TaskRow(queue, entry.stream_id, message, entry.body))
                if len(rows) >= size:
                    break
    return RowPage(rows, next_cursor="" if exhausted else cursor, scanned=scanned,
                   search_stopped=not exhausted and len(rows) < size)


def _queued(queue: str, entry: StreamEntry) -> TaskRow:
    return TaskRow(queue, entry.stream_id, decode(entry.body), entry.body)


def running_page(browser: StreamBrowser, queue: str, *, after: str = "", query: str = "",
                 consumer: str = "", size: int = PER_PAGE) -> RowPage:
    """Pending (delivered, not acked) entries of one stream with their holders (of one
    consumer only, when named)."""
    start = after if STREAM_ID.match(after) else "-"
    held = browser.held(queue, start, size + 1, consumer or None)
    rows = [_running(queue, item) for item in held[:size]]
    if query:
        rows = [row for row in rows if matches(row.message, row.stream_id, query)]
    return RowPage(rows, next_cursor=held[size - 1].stream_id if len(held) > size else "",
                   previous_cursor="-" if after else "")


def _running(queue: str, item: Held) -> TaskRow:
    return TaskRow(queue, item.stream_id, decode(item.body), item.body, consumer=item.consumer,
                   idle_ms=item.idle_ms, deliveries=item.deliveries)


def as_json_row(row: TaskRow) -> dict[str, Any]:
    """A running row for the refreshing list (plain values, escaped by the script)."""
    return {"queue": row.queue, "stream_id": row.stream_id, "task": row.task_name,
            "id": row.message_id, "consumer": row.consumer, "idle": row.idle,
            "deliveries": row.deliveries, "payload": row.preview}
