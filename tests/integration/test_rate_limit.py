"""Rate limits: global across workers, precise (no window holds more than N starts),
lossless (a task over the limit waits in the delayed set, unchanged, and runs once).

The worker test checks the task's own start times, taken a little after the limit
admitted each start (the rest of the steps, a thread switch): it allows `SLACK_S` for
that. The store test checks the admission times themselves (the server's), exactly.
"""

from __future__ import annotations

import threading

import pytest

from django_taskrunner import TaskMessage, lookup
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp.limit_tasks import (
    LIMITS_QUEUE,
    five_a_second,
    key_raises,
    limit_runs_key,
    once_an_hour,
    starts_key,
    two_a_second_per_account,
)

pytestmark = pytest.mark.django_db(transaction=True)

SLACK_S = 0.15


def runs(r, name: str) -> dict[str, int]:
    found = {k.decode(): int(v) for k, v in r.hgetall(limit_runs_key()).items()}
    return {k: v for k, v in found.items() if k.startswith(f"{name}:")}


def test_twenty_tasks_under_five_a_second_on_two_workers_run_once_never_six_a_second(r):
    with running_worker(LIMITS_QUEUE, consumer="w1") as one, \
            running_worker(LIMITS_QUEUE, consumer="w2") as two:
        wait_for(lambda: leads(one) or leads(two), 10)
        # Given 20 tasks limited to 5 starts a second, all dispatched at once
        five_a_second.dispatch_many([{"n": n} for n in range(20)])

        # When both workers have run them all
        wait_for(lambda: len(runs(r, "five_a_second")) == 20, 30)

    # Then each ran exactly once, and no second held a sixth start
    assert runs(r, "five_a_second") == {f"five_a_second:{n}": 1 for n in range(20)}
    starts = sorted(float(v) for v in r.lrange(starts_key(), 0, -1))
    assert len(starts) == 20
    for first, sixth in zip(starts, starts[5:], strict=False):
        assert sixth - first > 1.0 - SLACK_S, (first, sixth)
    assert r.zcard(keys.delayed_key(get_store().prefix, LIMITS_QUEUE)) == 0


def test_the_store_never_admits_more_than_the_limit_in_any_window(r):
    # Given 8 threads taking starts of one limit, 3 per 300 ms, as fast as they can
    store = get_store().limits
    key = keys.limit_key(store.prefix, "default", "rate", "t", "")
    admitted: list[int] = []
    lock = threading.Lock()

    def take(n: int) -> None:
        for i in range(40):
            reply = store.take_rate(key, 3, 300, f"{n}-{i}")
            if reply.admitted:
                with lock:
                    admitted.append(reply.now_ms)

    threads = [threading.Thread(target=take, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    # Then any 4 admissions in a row lie more than 300 ms apart (server time)
    admitted.sort()
    assert len(admitted) >= 3
    for first, fourth in zip(admitted, admitted[3:], strict=False):
        assert fourth - first > 300


def test_a_task_over_the_limit_waits_unchanged_as_delayed_without_spending_an_attempt(r):
    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        # Given a task limited to one start an hour, dispatched twice
        messages = [once_an_hour.dispatch({"n": 1}), once_an_hour.dispatch({"n": 2})]

        # When one ran and the other met the limit (whichever a thread took first)
        wait_for(lambda: r.zcard(keys.delayed_key(get_store().prefix, LIMITS_QUEUE)), 10)
        wait_for(lambda: any(lookup(m.id).status == "succeeded" for m in messages), 10)

    # Then the other waits in the delayed set, its message unchanged (attempt 1), due
    # when the window frees, and its record says it is delayed by the rate limit
    assert sum(runs(r, "once_an_hour").values()) == 1
    (second,) = [m for m in messages if lookup(m.id).status != "succeeded"]
    ((body, due),) = r.zrange(keys.delayed_key(get_store().prefix, LIMITS_QUEUE), 0, -1,
                              withscores=True)
    assert TaskMessage.from_json(body) == second
    record = lookup(second.id)
    assert record.status == "delayed" and record.attempt == 1
    assert r.hget(keys.record_key(get_store().prefix, second.id), "lw") == b"rate 1/h"
    store = get_store().limits
    key = keys.limit_key(store.prefix, LIMITS_QUEUE, "rate", once_an_hour.name, "")
    (state,) = store.inspect_many([(key, 3_600_000)], int(due) - 3_600_000 + 1000)
    assert state.waiting == 1


def test_a_rate_key_limits_each_key_on_its_own(r):
    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        two_a_second_per_account.dispatch_many(
            [{"account": a, "n": n} for a in ("x", "y") for n in range(3)])
        wait_for(lambda: len(runs(r, "per_account")) == 6, 20)
    assert set(runs(r, "per_account").values()) == {1}
    prefix = get_store().prefix
    for account in ("x", "y"):
        assert r.exists(keys.limit_key(prefix, LIMITS_QUEUE, "rate",
                                       two_a_second_per_account.name, account))


def test_a_rate_key_that_raises_fails_the_task_clearly_and_the_worker_goes_on(r):
    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        message = key_raises.dispatch({"n": 1})
        wait_for(lambda: FailedTask.objects.filter(message_id=message.id).exists(), 10)
        five_a_second.dispatch({"n": "after"})
        wait_for(lambda: runs(r, "five_a_second"), 10)
    row = FailedTask.objects.get(message_id=message.id)
    assert "rate_key of task" in row.error and "KeyError" in row.error
    assert r.hget(limit_runs_key(), "key_raises") is None
    assert lookup(message.id).status == "failed"


def test_a_task_cancelled_while_it_waits_on_a_limit_keeps_that_wait(r):
    """The wait of a task cancelled in the delayed set ends when the task ended, on its
    record (the task page's timeline draws it), instead of vanishing."""
    from django_taskrunner import cancel

    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        messages = [once_an_hour.dispatch({"n": 1}), once_an_hour.dispatch({"n": 2})]
        wait_for(lambda: any(lookup(m.id).status == "delayed" for m in messages), 10)
    (waiting,) = [m for m in messages if lookup(m.id).status == "delayed"]

    assert cancel(waiting.id)

    record = lookup(waiting.id)
    assert record.status == "cancelled"
    (wait,) = record.limit_waits
    assert wait.limit == "rate 1/h"
    assert wait.ended_ms is not None and wait.since_ms <= wait.ended_ms
