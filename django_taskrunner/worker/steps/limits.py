"""Step: a task with a concurrency limit takes a slot, one with a rate limit a start,
before it runs; one that cannot waits in the delayed set, not failed and not retried.

A task with neither option pays one attribute check. The wait is the acker's requeue
(`requeue.lua`: the same body into the delayed set at the time to try again, and the
ack of this entry, in one script), so a crash between the two cannot lose or double
it; the attempt counter is unchanged (it is the same body). Its record says "delayed",
with the limit in field `lw` ("rate 5/s") and when it began waiting in `lws`; the record
script keeps the first `lws` of a wait and, once the task starts, moves the wait into
`lx:<lws>` (`TaskRecord.limit_waits`, the task page's timeline): no command of its own.

A slot is a lease tied to this attempt (holder: the task id): the heartbeat renews it
(`Attempt.slots`), the first outcome step frees it with the ack (`free_slots`), and the
lease runs out within the reservation timeout when the worker dies. The concurrency
slot is taken before the rate start, so a rate refusal hands the slot back (with the
requeue) and a concurrency refusal never spends a start.

A limit key Redis refuses to serve (it holds another type, a script error) is no fault
of the task: the error is logged once per key, and the task waits `BROKEN_KEY_WAIT_MS`
in the delayed set (reason "<kind> key unusable" in `lw`) and tries again, until the key
is fixed or deleted. Only the tasks of that key wait; the worker and other keys go on.
An outage (`REDIS_DOWN`) is not caught here: the entry stays pending, as for any step.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.core.limits import LimitKeyError, limit_key_value, parse_rate
from django_taskrunner.core.records import PENDING_TTL_S
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR
from django_taskrunner.store.limits import Limits, Slot, Take
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.worker.steps.record import may_have_steps, record_ttl
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

logger = logging.getLogger(__name__)

# A task refused a concurrency slot tries again after this, longer the more wait ahead
# of it (one more base per `limit` waiters), at most `SLOT_WAIT_MAX_MS`, plus up to
# `SLOT_JITTER_MS` so waiters spread out.
SLOT_WAIT_BASE_MS = 200
SLOT_WAIT_MAX_MS = 5_000
SLOT_JITTER_MS = 100
# A task whose limit key Redis refuses (wrong type...) tries again after this, plus jitter.
BROKEN_KEY_WAIT_MS = 5_000

# The limit keys whose error was logged: each once, until it serves again.
_broken_keys: set[str] = set()
_broken_lock = threading.Lock()


def check_limits(executor: Executor, run: Run) -> bool:
    """False after putting a task over its limits back to wait (or failing one whose
    key function broke); True, holding its slot and start, when it may run."""
    task = run.task
    assert task is not None
    options = task.options
    if options.rate_limit is None and options.concurrency_limit is None:
        return True
    message = run.message
    assert message is not None
    try:
        concurrency = (None if options.concurrency_limit is None else
                       limit_key_value("concurrency_key", task.name, options.concurrency_key,
                                 message.payload))
        rate = (None if options.rate_limit is None else
                limit_key_value("rate_key", task.name, options.rate_key, message.payload))
    except LimitKeyError as error:
        logger.error("task=%s id=%s: %s; recorded as failed", task.name, message.id, error)
        executor.record_and_ack(run, error, attempts=message.attempt - 1, event=locks.FAILED)
        return False
    store = executor.broker.store.limits
    queue = options.queue or get_settings().DEFAULT_QUEUE
    if concurrency is not None and options.concurrency_limit is not None:
        if not _take_slot(executor, run, store, keys.limit_key(
                store.prefix, queue, "concurrency", task.name, concurrency), concurrency):
            return False
    if rate is not None and options.rate_limit is not None:
        if not _take_rate(executor, run, store, queue, rate):
            return False
    return True


def _take_slot(executor: Executor, run: Run, store: Limits, key: str, value: str) -> bool:
    """A concurrency slot for the run (held in `run.slots`), else the run deferred."""
    task, message = run.task, run.message
    assert task is not None and message is not None
    limit = task.options.concurrency_limit
    assert limit is not None
    timeout_ms = message.reservation_timeout_ms
    lease_ms = (round(executor.reservation_timeout * 1000) if timeout_ms is None
                else timeout_ms)
    take = _guarded(key, lambda: store.take_slot(key, limit, message.id, lease_ms,
                                                 SLOT_WAIT_BASE_MS, SLOT_WAIT_MAX_MS))
    if take is None:
        defer(executor, run, _broken_wait_ms(), "concurrency key unusable")
        return False
    if not take.admitted:
        jitter = random.randint(0, SLOT_JITTER_MS)  # noqa: S311 - spreads waiters
        defer(executor, run, take.wait_ms + jitter, limit_name("concurrency", limit, value))
        return False
    run.slots = (Slot(key, message.id, lease_ms),)
    return True


def _take_rate(executor: Executor, run: Run, store: Limits, queue: str, rate: str) -> bool:
    """A start within the task's rate limit, else the run deferred until one is free."""
    task, message = run.task, run.message
    assert task is not None and message is not None and task.options.rate_limit is not None
    limit = parse_rate(task.options.rate_limit)
    key = keys.limit_key(store.prefix, queue, "rate", task.name, rate)
    take = _guarded(key, lambda: store.take_rate(key, limit.limit, limit.window_ms,
                                                 message.id))
    if take is None:
        defer(executor, run, _broken_wait_ms(), "rate key unusable")
        return False
    if not take.admitted:
        defer(executor, run, take.wait_ms, limit_name("rate", task.options.rate_limit, rate))
        return False
    return True


def limit_name(kind: str, limit: object, key: str) -> str:
    """Which limit a task waits on, for people: "rate 5/s", "concurrency 2 (key acme)"."""
    return f"{kind} {limit}" + (f" (key {key})" if key else "")


def _guarded(key: str, take: Callable[[], Take]) -> Take | None:
    """`take()`, or None (logged once per key) when Redis refuses the key itself."""
    try:
        result = take()
    except REDIS_DOWN:
        raise
    except REDIS_ERROR as error:
        with _broken_lock:
            first = key not in _broken_keys
            _broken_keys.add(key)
        if first:
            logger.error("limit key %s cannot be used (%s); its tasks wait and try again "
                         "every %d ms until it is fixed or deleted", key, error,
                         BROKEN_KEY_WAIT_MS)
        return None
    if _broken_keys and key in _broken_keys:
        with _broken_lock:
            _broken_keys.discard(key)
        logger.warning("limit key %s works again", key)
    return result


def _broken_wait_ms() -> int:
    return BROKEN_KEY_WAIT_MS + random.randint(0, SLOT_JITTER_MS)  # noqa: S311 - spreads


def free_slots(executor: Executor, run: Run) -> bool:
    """The first outcome step: the attempt ended, so its slots go back (with its ack)."""
    attempt = run.attempt
    slots = attempt.slots if attempt is not None else run.slots
    if slots:
        if attempt is not None:
            attempt.slots = ()
        run.slots = ()
        executor.free_slots(slots)
    return True


def defer(executor: Executor, run: Run, wait_ms: int, reason: str) -> None:
    """Put the delivery back, unchanged, into the delayed set for `wait_ms`: its ack and
    the new entry in one script, with a "delayed" record, and any slot taken handed back."""
    message = run.message
    assert message is not None and run.delivery.body is not None
    if run.slots:
        executor.free_slots(run.slots)
        run.slots = ()
    now_ms = clock.now_ms()
    due_ms = now_ms + max(1, wait_ms)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("task=%s id=%s is over its %s limit; waiting %d ms", message.task_name,
                     message.id, reason, wait_ms)
    ttl = record_ttl(executor, run)
    if ttl > 0 and message.task_name:
        fields = [("s", "delayed"), ("t", message.task_name), ("q", message.queue),
                  ("a", str(message.attempt)), ("w", ""), ("d", str(message.dispatched_at_ms)),
                  ("due", str(due_ms)), ("lw", reason), ("lws", str(now_ms)),
                  ("ttl", str(ttl))]
        if message.dispatch_token is not None:
            fields.append(("h", locks.holder_value(message)))
        executor.record(RecordWrite(message.id, tuple(fields),
                                    PENDING_TTL_S + wait_ms // 1000 + 1,
                                    steps=may_have_steps(run)))
    executor.requeue(run.shard, run.stream_id, run.delivery.body, due_ms)
