"""Module-level fixture tasks, autodiscovered like any app's tasks.py.

Each records its runs in Redis under the test's prefix, so a test can count runs
made by worker threads or by other processes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django_taskrunner import Task, get_redis, task
from django_taskrunner.conf import get_settings
from django_taskrunner.store import keys


def runs_key() -> str:
    return f"{get_settings().PREFIX}:test:runs"


def record(name: str, payload: Any) -> None:
    key = payload.get("n") if isinstance(payload, dict) else payload
    get_redis().hincrby(runs_key(), f"{name}:{key}", 1)


@task
def noop(payload: Any) -> None:
    record("noop", payload)


@task(max_retry=2, retry_backoff=0)
def always_fails(payload: Any) -> None:
    record("always_fails", payload)
    raise ValueError(f"boom {payload}")


@task(max_retry=3, retry_backoff=0)
def fails_twice(payload: Any) -> None:
    record("fails_twice", payload)
    runs = int(get_redis().hget(runs_key(), f"fails_twice:{payload.get('n')}") or 0)
    if runs <= 2:
        raise RuntimeError("not yet")


@task
def sleeper(payload: Any) -> None:
    time.sleep(float(payload.get("seconds", 1)))
    record("sleeper", payload)


@task
def marked_sleeper(payload: Any) -> None:
    """Like `sleeper`, and says when it starts: a test waits for that, not for a guess."""
    record("marked_sleeper:start", payload)
    time.sleep(float(payload.get("seconds", 1)))
    record("marked_sleeper", payload)


@task(queue="other")
def on_other_queue(payload: Any) -> None:
    record("on_other_queue", payload)


@task(takes_context=True)
def with_context(ctx: Any, payload: Any) -> None:
    get_redis().hset(runs_key(), f"ctx:{payload['n']}", f"{ctx.task_name}|{ctx.attempt}|{ctx.id}")


@task(takes_context=True)
def context_queue(ctx: Any, payload: Any) -> None:
    """Records the queue its context names (tests/integration/test_shards.py)."""
    get_redis().hset(runs_key(), f"context_queue:{payload['n']}", ctx.queue)


@task
def nothing(payload: Any) -> None:
    """Does nothing: what a benchmark measures is the queue itself (bench/cluster.py)."""


@task
def timed_noop(payload: Any) -> None:
    """Counts its runs and records when it last started, in one hash (bench/cluster.py)."""
    from tests.worker_helpers import app_now_ms

    pipe = get_redis().pipeline(transaction=False)
    pipe.hincrby(runs_key(), f"timed_noop:{payload['n']}", 1)
    pipe.hset(runs_key(), f"started:{payload['n']}", app_now_ms())
    pipe.execute()


@task
def creates_row(payload: Any) -> None:
    from tests.testapp.models import Note

    Note.objects.create(text=str(payload["text"]))


# -- unique tasks and task ids (tests/integration/test_unique_*.py, test_task_id.py) --------


@task(unique=True, unique_for=60, unique_key=lambda payload: payload["order"])
def unique_order(payload: Any) -> None:
    """The seed example: one receipt per order in flight."""
    get_redis().hincrby(runs_key(), f"unique_order:{payload['order']}", 1)


def _try_dispatch(fixture: Task, payload: Any, **options: Any) -> str:
    """'ok:<id>' if the dispatch went in, else 'held:<holder id>'."""
    from django_taskrunner import TaskAlreadyDispatched, TaskIdConflict, dispatch

    try:
        return f"ok:{dispatch(fixture, payload, **options).id}"
    except (TaskAlreadyDispatched, TaskIdConflict) as exc:
        return f"held:{exc.holder_id}"


@task(unique=True, unique_for=60, unique_key=lambda payload: str(payload["k"]), max_retry=2,
      retry_backoff=0, takes_context=True)
def unique_probe(ctx: Any, payload: Any) -> None:
    """While it runs, tries to dispatch a duplicate (same key) and records what happened.

    Records `probe:<k>:<attempt>` = ok:<id> | held:<holder>; raises on the first
    `fail` attempts. A duplicate it dispatched (`inner`) only records that it ran.
    """
    redis = get_redis()
    if payload.get("inner"):
        redis.hincrby(runs_key(), f"unique_probe:inner:{payload['k']}", 1)
        return
    seen = _try_dispatch(unique_probe, {"k": payload["k"], "inner": True},
                         queue=ctx.queue)
    redis.hset(runs_key(), f"probe:{payload['k']}:{ctx.attempt}", seen)
    if ctx.attempt <= int(payload.get("fail", 0)):
        raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")


@task(max_retry=2, retry_backoff=0, takes_context=True)
def id_probe(ctx: Any, payload: Any) -> None:
    """Like unique_probe, for its own task_id: dispatches again with `task_id=ctx.id`.

    Also records `idttl:<id>:<attempt>`, the reservation's PTTL as the attempt starts.
    """
    redis = get_redis()
    if payload.get("inner"):
        redis.hincrby(runs_key(), f"id_probe:inner:{ctx.id}", 1)
        return
    id_ttl = redis.pttl(keys.task_id_key(get_settings().PREFIX, ctx.queue, ctx.id))
    redis.hset(runs_key(), f"idttl:{ctx.id}:{ctx.attempt}", id_ttl)
    seen = _try_dispatch(id_probe, {"inner": True}, task_id=ctx.id,
                         queue=ctx.queue)
    redis.hset(runs_key(), f"idprobe:{ctx.id}:{ctx.attempt}", seen)
    if ctx.attempt <= int(payload.get("fail", 0)):
        raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")


@task(unique=True, unique_for=60, unique_key=lambda payload: f"round-{payload['round']}")
def unique_race(payload: Any) -> None:
    """Dispatched by many threads and processes at once; never needs to run."""


@task(unique=True, unique_for=60, unique_key=lambda payload: payload["k"], takes_context=True)
def gated_report(ctx: Any, payload: Any) -> None:
    """Counts its runs (`gated_report:<k>`, the nth run waits for gate n), records which
    worker ran each, then waits until the test opens that run's gate
    (tests/integration/test_holder_tokens.py)."""
    import os

    redis = get_redis()
    run = redis.hincrby(runs_key(), f"gated_report:{payload['k']}", 1)
    redis.hset(runs_key(), f"gated_report:{payload['k']}:{run}", os.getpid())
    deadline = time.monotonic() + 60
    while not redis.exists(f"{runs_key()}:gate:{run}") and time.monotonic() < deadline:
        time.sleep(0.02)


@task(unique=True, unique_for=30)
def unique_whole(payload: Any) -> None:
    """No unique_key: one lock for the whole task name (warned about once)."""


class VirtualRunTime:
    """`clock.monotonic()` for tests of measured run times: real time, plus the time the
    current thread's tasks spent. A task then takes exactly what it spends, however busy
    the machine: no sleep whose wake-up a loaded machine delays (see `virtual_run_time`
    in tests/conftest.py)."""

    def __init__(self) -> None:
        self._spent = threading.local()

    def monotonic(self) -> float:
        return time.monotonic() + getattr(self._spent, "seconds", 0.0)

    def spend(self, seconds: float) -> None:
        self._spent.seconds = getattr(self._spent, "seconds", 0.0) + seconds


virtual_run_time: VirtualRunTime | None = None  # set by the `virtual_run_time` fixture


def spend(seconds: float) -> None:
    """Take `seconds`: a real sleep, or virtual time when a test asked for it."""
    if virtual_run_time is None:
        time.sleep(seconds)
    else:
        virtual_run_time.spend(seconds)


@task
def sleep_50ms(payload: Any) -> None:
    """Known run time for the statistics tests."""
    spend(0.05)


@task
def sleep_100ms(payload: Any) -> None:
    spend(0.1)


@task
def sleep_20ms(payload: Any) -> None:
    """The autoscaling workload: many short tasks."""
    time.sleep(0.02)


def stamps_key() -> str:
    return f"{get_settings().PREFIX}:test:stamps"


@task
def stamp(payload: Any) -> None:
    """Counts its runs and records when each started (epoch ms), keyed by payload["n"]."""
    from tests.worker_helpers import app_now_ms

    client = get_redis()
    client.rpush(f"{stamps_key()}:{payload['n']}", app_now_ms())
    record("stamp", payload)


@task(max_retry=1, retry_backoff=0.6)
def fails_once_with_backoff(payload: Any) -> None:
    """Fails its first attempt; retried after 0.6 s. Records each attempt's start."""
    from tests.worker_helpers import app_now_ms

    client = get_redis()
    client.rpush(f"{stamps_key()}:backoff:{payload['n']}", app_now_ms())
    if client.hincrby(runs_key(), f"fails_once_with_backoff:{payload['n']}", 1) == 1:
        raise RuntimeError("first attempt fails")


@task(takes_context=True)
def count_by_id(ctx: Any, payload: Any) -> None:
    """Counts runs per message id (periodic occurrences have one id each)."""
    get_redis().hincrby(runs_key(), f"count_by_id:{ctx.id}", 1)


# -- reliability: time limits, expiry, reservation timeouts -------------------------


@task(takes_context=True, time_limit=0.3, max_retry=1, retry_backoff=0)
def stops_when_cancelled(ctx: Any, payload: Any) -> None:
    """Cooperative: polls ctx.cancelled and returns once the time limit set it."""
    record("stops_when_cancelled", payload)
    while not ctx.cancelled:
        time.sleep(0.01)
    get_redis().hset(runs_key(), f"cancelled:{payload['n']}", ctx.attempt)


@task(time_limit=0.2)
def blocks_in_c(payload: Any) -> None:
    """Ignores its time limit inside a C call that cannot be interrupted."""
    record("blocks_in_c:start", payload)
    time.sleep(float(payload["seconds"]))
    record("blocks_in_c:end", payload)


@task(time_limit=0.2)
def spins_in_python(payload: Any) -> None:
    """Ignores its time limit in a pure-Python loop, which the watchdog can interrupt."""
    record("spins_in_python:start", payload)
    try:
        while True:
            pass
    finally:
        record("spins_in_python:interrupted", payload)


@task(expires=0.2)
def expiring(payload: Any) -> None:
    record("expiring", payload)


@task(reservation_timeout=4)
def patient(payload: Any) -> None:
    record("patient", payload)


@task(queue="short-lease", reservation_timeout=2)
def short_lease(payload: Any) -> None:
    """Far longer than its 2-second reservation timeout, and never calls ctx.heartbeat()."""
    record("short_lease:start", payload)
    time.sleep(float(payload.get("seconds", 6)))
    record("short_lease", payload)


@task(takes_context=True)
def beats_by_hand(ctx: Any, payload: Any) -> None:
    get_redis().hset(runs_key(), f"beat:{payload['n']}", int(ctx.heartbeat()))


# -- task records (tests/integration/test_records.py) --------------------------------


@task
def returns_double(payload: Any) -> Any:
    return {"double": payload["n"] * 2}


@task
def returns_unencodable(payload: Any) -> Any:
    return {"when": object()}


@task
def returns_huge(payload: Any) -> Any:
    return "x" * (200 * 1024)


@task(result_ttl=0)
def keeps_no_record(payload: Any) -> Any:
    record("keeps_no_record", payload)
    return 1


@task(max_retry=1, retry_backoff=60)
def fails_then_retries_later(payload: Any) -> None:
    raise ValueError("first attempt fails")


CANCELLED_SEEN: dict[str, float] = {}


@task(takes_context=True, unique=True, unique_for=60, max_retry=2, retry_backoff=0)
def runs_until_cancelled(ctx: Any, payload: Any) -> str:
    """Gives its progress, then runs until cancelled (at most 20 s), then raises: a
    cancelled task is not retried all the same."""
    record("runs_until_cancelled:start", payload)
    ctx.set_progress({"step": 1, "of": 2})
    deadline = time.monotonic() + 20
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    CANCELLED_SEEN[ctx.id] = time.monotonic()
    record("runs_until_cancelled:stopped", payload)
    raise RuntimeError("stopped")


@task(unique=True, unique_for=60, max_retry=3, retry_backoff=0)
def ignores_cancel(payload: Any) -> None:
    """Runs for up to 30 s whatever ctx.cancelled says: only a terminate stops it."""
    record("ignores_cancel:start", payload)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        record("ignores_cancel:stopped", payload)
    record("ignores_cancel:finished", payload)


@task(unique=True, unique_for=60)
def unique_records(payload: Any) -> None:
    record("unique_records", payload)


@task(max_retry=0)
def fails_with_nul(payload: Any) -> None:
    """Fails with a NUL byte in its error, which PostgreSQL text cannot hold."""
    record("fails_with_nul", payload)
    raise ValueError("before\x00after")


from tests.testapp import (  # noqa: E402 - after the tasks above, which they import
    async_tasks,  # noqa: E402,F401 - registers the async fixture tasks
    chaos_tasks,  # noqa: E402,F401 - registers the chaos suite's tasks
    fair_tasks,  # noqa: E402,F401 - registers the fair queue tests tasks
    limit_tasks,  # noqa: E402,F401 - registers the limit tests' tasks
    process_tasks,  # noqa: E402,F401 - registers the --processes tests' tasks
    step_tasks,  # noqa: E402,F401 - registers the durable steps tasks
    workflow_tasks,  # noqa: E402,F401 - registers the workflow tests tasks
)


@task(takes_context=True)
def forgets_its_stream_id(ctx: Any, payload: Any) -> None:
    """Drops its record's stream id while it runs, as a task does whose move onto the
    stream (a fair feed, a promotion) sent its record's 'sid' in a batch still on its way
    (tests/integration/test_records.py). It drops it once its "running" record, which
    carries the id too, was written (2 to 22 ms after its start)."""
    time.sleep(0.1)
    get_redis().hdel(keys.record_key(get_settings().PREFIX, ctx.id), "sid")
