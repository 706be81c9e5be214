"""A task's timeline, drawn on its page: "why was this late?" answered by looking.

From its record alone (`TaskRecord`, with each ended attempt's trace): dispatched, due
(a delayed task), each wait on a rate or concurrency limit (from its first refusal to
its slot), then for each attempt the wait on its stream (from the entry's time to
its start), its run (start to end, with its worker, outcome and error), and the attempt
running now; all on one time axis from the dispatch to the end (or now), each with its
duration. One time format with seconds (and milliseconds on the axis's rows), durations
in ms below a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone

from django_taskrunner.core.records import LimitWait, TaskRecord

MIN_WIDTH = 0.4  # percent: a 1 ms step stays visible


def moment(value: datetime | int | None, *, ms: bool = False) -> str:
    """A time for people, in the site's time zone, with seconds (and ms if asked)."""
    if value is None:
        return "–"
    if isinstance(value, int):
        value = datetime.fromtimestamp(value / 1000, tz=UTC)
    local = timezone.localtime(value)
    text = f"{local:%Y-%m-%d %H:%M:%S}"
    return f"{text}.{local.microsecond // 1000:03d}" if ms else text


def duration(ms: int | None) -> str:
    """A duration for people: ms below a second, then s, min, h."""
    if ms is None:
        return "–"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


@dataclass(frozen=True)
class Step:
    """One row: what, from when, for how long, where its bar goes (percent)."""

    kind: str  # dispatched | due | limit | waited | ran | running | finished
    label: str
    at: str
    took: str
    left: float
    width: float
    detail: str = ""
    bad: bool = False


@dataclass(frozen=True)
class Timeline:
    steps: tuple[Step, ...]
    start: str
    end: str
    total: str


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


class _Axis:
    def __init__(self, start: int, end: int) -> None:
        self.start, self.span = start, max(1, end - start)

    def place(self, begin: int, end: int | None = None) -> tuple[float, float]:
        left = min(100.0, max(0.0, (begin - self.start) * 100 / self.span))
        width = 0.0 if end is None else max(MIN_WIDTH, (end - begin) * 100 / self.span)
        return round(left, 2), round(min(width, 100 - left), 2)


def timeline(record: TaskRecord, now_ms: int) -> Timeline | None:
    """The steps of `record` on one axis; None when it knows no time at all."""
    dispatched = _ms(record.dispatched_at)
    ends = [_ms(record.finished_at)] if record.finished_at else []
    ends += [trace.ended_ms for trace in record.attempts]
    ends += [wait.ended_ms for wait in record.limit_waits if wait.ended_ms is not None]
    first = dispatched or min((t.ready_ms or t.started_ms for t in record.attempts), default=None)
    if first is None:
        return None
    finished = _ms(record.finished_at)
    running = record.status == "running" and record.started_at is not None
    last = max([first, *ends, *([now_ms] if running or not record.finished else [])])
    axis = _Axis(first, last)
    steps = [Step("dispatched", "dispatched", moment(first, ms=True), "", *axis.place(first))]
    due = _ms(record.due_at)
    if due is not None:
        steps.append(Step("due", "due (delayed until)", moment(due, ms=True),
                          duration(max(0, due - first)) + " after dispatch",
                          *axis.place(first, max(first, due))))
    waits = [(wait.since_ms, _limit_step(axis, wait, finished or now_ms))
             for wait in record.limit_waits]
    for trace in record.attempts:
        steps += [step for since, step in waits if since <= trace.started_ms]
        waits = [(since, step) for since, step in waits if since > trace.started_ms]
        steps += _attempt_steps(axis, trace.number, trace.ready_ms, trace.started_ms,
                                trace.ended_ms, trace.worker, trace.outcome, trace.error)
    steps += [step for _since, step in waits]
    traced = {trace.number for trace in record.attempts}
    started = _ms(record.started_at)
    if running and started is not None and record.attempt not in traced:
        steps.append(Step("running", f"attempt {record.attempt}: running",
                          moment(started, ms=True), duration(now_ms - started) + " so far",
                          *axis.place(started, now_ms), detail=record.worker or ""))
    if finished is not None:
        steps.append(Step("finished", record.status, moment(finished, ms=True),
                          duration(finished - first) + " after dispatch",
                          *axis.place(finished), bad=record.status != "succeeded"))
    return Timeline(tuple(steps), moment(first), moment(last), duration(last - first))


def _limit_step(axis: _Axis, wait: LimitWait, open_end: int) -> Step:
    """A wait on a limit: from its first refusal to its slot (or to now / the end)."""
    ended = wait.ended_ms if wait.ended_ms is not None else max(wait.since_ms, open_end)
    took = duration(max(0, ended - wait.since_ms))
    return Step("limit", f"waited on limit {wait.limit}" if wait.ended_ms is not None
                else f"waiting on limit {wait.limit}", moment(wait.since_ms, ms=True),
                took if wait.ended_ms is not None else f"{took} so far",
                *axis.place(wait.since_ms, ended),
                detail="" if wait.ended_ms is None else f"got its slot at {moment(ended)}")


def _attempt_steps(axis: _Axis, number: int, ready: int | None, started: int, ended: int,
                   worker: str, outcome: str, error: str) -> list[Step]:
    steps = []
    if ready is not None and ready <= started:
        steps.append(Step("waited", f"attempt {number}: waited on its queue",
                          moment(ready, ms=True), duration(started - ready),
                          *axis.place(ready, started)))
    steps.append(Step("ran", f"attempt {number}: ran, {outcome}", moment(started, ms=True),
                      duration(max(0, ended - started)), *axis.place(started, ended),
                      detail=f"{worker}{' · ' + error if error else ''}",
                      bad=outcome not in ("succeeded",)))
    return steps
