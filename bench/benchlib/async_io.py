"""The completion signal of the I/O benchmark (bench/async_io.py): each finished task
counts itself and keeps the time; the first and the last time give the drain."""

from __future__ import annotations

import time

from benchlib.job import client

IO_DONE = "bench:io:done"
IO_FIRST = "bench:io:first"
IO_LAST = "bench:io:last"


def io_done(n: int) -> None:
    """One task finished: count it and record the time (one pipelined round trip)."""
    now = time.time()
    pipe = client().pipeline(transaction=False)
    pipe.incr(IO_DONE)
    pipe.set(IO_FIRST, now, nx=True)
    pipe.set(IO_LAST, now)
    pipe.execute()


def reset() -> None:
    client().delete(IO_DONE, IO_FIRST, IO_LAST)


def finished() -> int:
    return int(client().get(IO_DONE) or 0)


def span() -> float:
    """Seconds from the first finish to the last."""
    first, last = client().mget(IO_FIRST, IO_LAST)
    return float(last) - float(first)
