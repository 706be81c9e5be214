"""The finished index: per queue, the ids of recently finished tasks scored by their
finish time (`keys.finished_key`), which the admin's "finished" list pages through.

A final record write lists its task in the same script (`record_write.lua`, one server)
or right after it in the same pipeline (`record_index.lua`, a cluster); see
`Records.queue_writes`. Here: the pages (the index read a batch at a time, then the
records of those ids), its size, and the listing of a task no worker will write the
final record of. Redis outage errors pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.values import text

if TYPE_CHECKING:
    from django_taskrunner.store.records import RecordWrite


@dataclass(frozen=True)
class FinishedLimits:
    """What the finished index keeps: `keep` ids per queue (`FINISHED_LIST_SIZE`, 0: no
    index), for at least `result_ttl_s` seconds (`RESULT_TTL`). The store is handed these
    (it reads no settings); the defaults are the settings' defaults."""

    keep: int = 10_000
    result_ttl_s: int = 86_400


class FinishedIndex:
    """The finished indexes under one client and key prefix."""

    def __init__(self, client: Any, prefix: str, limits: FinishedLimits | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.limits = limits or FinishedLimits()

    def page(self, queue: str, cursor: str, count: int, statuses: frozenset[str],
             scan: int) -> FinishedPage:
        """Up to `count` finished tasks of `queue`, newest first, from `cursor` ("": the
        newest; else a `FinishedPage.next_cursor`), whose status is in `statuses`: the
        index read a batch at a time (ZREVRANGEBYSCORE from the cursor's score, past the
        ids of that score already shown), then their records (HMGET, one pipeline per
        batch), at most `scan` ids per page. Ids whose record expired are skipped and
        removed from the index."""
        index = keys.finished_key(self.prefix, queue)
        at = _FinishedCursor.parse(cursor)
        rows: list[FinishedRow] = []
        scanned = 0
        while len(rows) < count and scanned < scan:
            want = min(max(count - len(rows), 50), scan - scanned)
            batch = self.client.zrevrangebyscore(
                index, "+inf" if at.top is None else at.top, "-inf", start=at.skip, num=want,
                withscores=True)
            at, read = self._filter_batch(index, at, batch, statuses, count - len(rows), rows)
            scanned += read
            if len(batch) < want and read == len(batch):
                return FinishedPage(rows, "", scanned)  # the index's end
        return FinishedPage(rows, at.text(), scanned)

    def count(self, queue: str) -> int:
        """ZCARD of `queue`'s finished index."""
        return int(self.client.zcard(keys.finished_key(self.prefix, queue)))

    def _filter_batch(self, index: str, at: _FinishedCursor, batch: list[Any],
                      statuses: frozenset[str], room: int,
                      rows: list[FinishedRow]) -> tuple[_FinishedCursor, int]:
        """Append to `rows` (at most `room`) the ids of `batch` whose record holds one of
        `statuses`; the cursor past the last id looked at, and how many were."""
        pipe = self.client.pipeline(transaction=False)
        for member, _ in batch:
            pipe.hmget(keys.record_key(self.prefix, text(member)), FINISHED_FIELDS)
        gone: list[tuple[Any, int]] = []
        read = 0
        for (member, score), values in zip(batch, pipe.execute() if batch else [],
                                           strict=True):
            read += 1
            at = at.past(int(score))
            fields = {name: text(value, errors="replace")
                      for name, value in zip(FINISHED_FIELDS, values, strict=True)
                      if value is not None}
            if "s" not in fields:
                gone.append((member, int(score)))
            elif fields["s"] in statuses:
                rows.append(FinishedRow(text(member), int(score), fields))
                room -= 1
                if room == 0:
                    break
        if gone:  # expired records: out of the index (and out of the cursor's offset)
            self.client.zrem(index, *(member for member, _ in gone))
            at = _FinishedCursor(at.top, at.skip - sum(1 for _, sc in gone if sc == at.top))
        return at, read

    def list_task(self, queue: str, task_id: str, finished_ms: int, ttl_s: int) -> None:
        """`record_index.lua`: list a task no worker will write the final record of (a
        queued message a cancel deleted) in its queue's finished index, as a final write
        does (nothing with the index off)."""
        keep, result_ttl_s = self.limits.keep, self.limits.result_ttl_s
        if keep > 0:
            kept_s = max(ttl_s, result_ttl_s)
            scripts.run(self.client, "record_index", [keys.finished_key(self.prefix, queue)],
                        [task_id, str(finished_ms), str(keep),
                         str(finished_ms - kept_s * 1000), str(ttl_s)])


FINISHED_FIELDS = ("s", "t", "q", "a", "w", "d", "st", "f", "e")


@dataclass(frozen=True)
class FinishedRow:
    """One finished task of the index: its id, finish time and record fields (of
    `FINISHED_FIELDS`, those it holds)."""

    task_id: str
    finished_ms: int
    fields: dict[str, str]


@dataclass(frozen=True)
class FinishedPage:
    """A page of finished tasks; `next_cursor` "" when the index has no more;
    `scanned`: the ids read for it (at most the page's `scan`)."""

    rows: list[FinishedRow]
    next_cursor: str
    scanned: int


@dataclass(frozen=True)
class _FinishedCursor:
    """Where a page of the finished index starts: at score `top` (None: the newest),
    past the first `skip` ids of that score (ids finished in one millisecond)."""

    top: int | None = None
    skip: int = 0

    @classmethod
    def parse(cls, cursor: str) -> _FinishedCursor:
        top, _, skip = cursor.partition(":")
        if not (top.isdigit() and skip.isdigit()) or len(cursor) > 40:
            return cls()
        return cls(int(top), int(skip))

    def past(self, score: int) -> _FinishedCursor:
        """The cursor after an id of `score` (the ids come newest first)."""
        return _FinishedCursor(score, self.skip + 1 if score == self.top else 1)

    def text(self) -> str:
        return f"{self.top}:{self.skip}" if self.top is not None else ""


class _Index(NamedTuple):
    """Where and when a final write lists its task: its queue, finish time, and the
    oldest finish time its index keeps (a tuple: one is built per finished task)."""

    queue: str
    finished_ms: int
    cutoff_ms: int


def index_of(write: RecordWrite, keep: int, result_ttl_s: int) -> _Index | None:
    """The index entry of a final write naming its queue ('q') and finish time ('f'),
    kept as long as the longer of its record's TTL and `result_ttl_s` (`RESULT_TTL`);
    None for any other write, or with the index off."""
    if not write.final or keep <= 0:
        return None
    queue = finished = None
    for name, value in write.fields:
        if name == "q":
            queue = value
        elif name == "f":
            finished = value
    if not queue or finished is None or not finished.isdigit():
        return None
    finished_ms = int(finished)
    kept_s = max(write.ttl_s, result_ttl_s)
    return _Index(queue, finished_ms, finished_ms - kept_s * 1000)
