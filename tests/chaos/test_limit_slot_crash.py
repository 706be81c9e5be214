"""A worker SIGKILLed while its task holds a concurrency slot: the slot's lease runs out
within the task's reservation timeout (nobody renews it), the next task on the key
starts once it did, and the killed task is reclaimed and runs again."""

from __future__ import annotations

import json
import signal

import pytest

from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp.limit_tasks import holds_its_slot, limit_runs_key, spans_key
from tests.worker_helpers import app_now_ms

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

QUEUE = "limits-crash"
TIMEOUT_MS = 2000  # the task's reservation_timeout


def server_ms(r) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def runs(r, n: int) -> int:
    return int(r.hget(limit_runs_key(), f"holds_its_slot:{n}") or 0)


def test_the_slot_of_a_killed_worker_frees_within_the_reservation_timeout(r, spawn_worker):
    store = get_store().limits
    key = keys.limit_key(store.prefix, QUEUE, "concurrency", holds_its_slot.name, "")
    # Given a worker process whose task holds the key's only slot
    doomed = spawn_worker("--queue", QUEUE, "--concurrency", "2", "--no-scheduler",
                          "--consumer-name", "doomed")
    first = holds_its_slot.dispatch({"n": 1, "block": True})
    wait_for(lambda: runs(r, 1) == 1, 60)
    assert store.slot_holders(key, app_now_ms()) == [first.id]
    # and a worker here (the leader, for the delayed set); a second task on the key
    with running_worker(QUEUE, consumer="survivor") as survivor:
        wait_for(lambda: leads(survivor), 10)
        holds_its_slot.dispatch({"n": 2})

        # When the process is killed
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        killed_ms = server_ms(r)

        # Then its lease ends within the reservation timeout of the kill (server time)
        expiry = r.zscore(key, first.id)
        assert expiry is None or expiry <= killed_ms + TIMEOUT_MS
        # and both tasks run: the second once, the killed one again (reclaimed)
        wait_for(lambda: runs(r, 2) == 1 and runs(r, 1) == 2, 30)

    starts = {n: t for n, t in (json.loads(raw) for raw in r.lrange(spans_key(), 0, -1))}
    assert starts[2] * 1000 >= killed_ms - 50  # not before the kill: the slot was held
    assert store.slot_holders(key, app_now_ms()) == []
