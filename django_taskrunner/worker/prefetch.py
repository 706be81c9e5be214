"""How many messages one read asks for: `BATCH_SIZE`, grown while tasks are short.

A worker holds at most its threads' tasks plus one read's worth of messages (the bounded
prefetch, docs/design.md). A small read keeps a busy worker from sitting on messages an
idle one could run; but with short tasks every read (and every wake-up of the fetcher)
then carries a few messages, and that hand-off is most of a short task's cost. So the
read grows to about `PREFETCH_MS` of work at the rate the pool finishes tasks now, at
most `PREFETCH_MAX` messages: a flood of 1 ms tasks reads 100 at a time, while tasks of
a second or more still read `BATCH_SIZE`. What a worker sits on is thus bounded by time
as well as by count, and by bytes: a read grows only while its messages, at the size
the last reads' were, hold at most `PREFETCH_BYTES` (large payloads keep `BATCH_SIZE`).
`PREFETCH_MS = 0` keeps every read at `BATCH_SIZE`.
"""

from __future__ import annotations

# The most messages one read may grow to (a larger BATCH_SIZE is kept as it is), and
# the most bytes of messages it may grow to hold.
PREFETCH_MAX = 100
PREFETCH_BYTES = 16 * 1024 * 1024
# Seconds between two samples of the finishing rate: shorter gaps measure noise.
SAMPLE_S = 0.010


class Prefetch:
    """The read size of one worker, from how many tasks it finished lately.

    Not thread-safe: the worker calls `update()` under its buffer's lock.
    """

    def __init__(self, batch_size: int, prefetch_ms: int) -> None:
        self.floor = batch_size
        self.window_s = prefetch_ms / 1000
        self.size = batch_size  # what a read asks for now
        self.rate = 0.0  # tasks finished per second, smoothed over the last samples
        self._sampled_at: float | None = None
        self._sampled_count = 0
        self.message_bytes = 0.0  # the size of a message lately, smoothed over the reads

    def read(self, count: int, nbytes: int) -> None:
        """A read brought `count` messages of `nbytes` in all."""
        if count:
            size = nbytes / count
            self.message_bytes = size if not self.message_bytes else (
                self.message_bytes + size) / 2

    def update(self, completed: int, now: float) -> int:
        """The read size, given the worker's count of finished tasks at monotonic `now`."""
        if self.window_s <= 0:
            return self.size
        if self._sampled_at is None:
            self._sampled_at, self._sampled_count = now, completed
            return self.size
        elapsed = now - self._sampled_at
        if elapsed < SAMPLE_S:
            return self.size
        current = (completed - self._sampled_count) / elapsed
        # Half the last sample, half the past: a burst that ends shrinks the read within
        # a few samples, a single quiet gap does not throw away what was learnt.
        self.rate = (self.rate + current) / 2
        self._sampled_at, self._sampled_count = now, completed
        grown = min(round(self.rate * self.window_s), PREFETCH_MAX)
        if self.message_bytes:
            grown = min(grown, int(PREFETCH_BYTES // self.message_bytes))
        self.size = max(self.floor, grown)
        return self.size
