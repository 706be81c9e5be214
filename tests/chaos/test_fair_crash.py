"""Fair queues under crashes: 20 keys, 5,000 tasks, a worker process SIGKILLed twice.
Nothing is lost (every task runs; a killed worker's tasks are reclaimed), and the turns
go on across keys the whole time: no key's tasks wait while the others are served."""

from __future__ import annotations

import json
import signal

import pytest

from django_taskrunner import dispatch_many
from tests.integration.scheduling_helpers import wait_for
from tests.testapp.fair_tasks import (
    FAIR_CHAOS_QUEUE,
    fair_chaos_step,
    fair_runs_key,
    fair_starts_key,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

KEYS = 20
TASKS = 5000
SETTINGS = json.dumps({"RESERVATION_TIMEOUT": 2})


def started(r) -> int:
    return r.llen(fair_starts_key())


def spawn(spawn_worker, name: str, *extra: str):
    return spawn_worker("--queue", FAIR_CHAOS_QUEUE, "--concurrency", "4", "--batch-size", "4",
                        "--consumer-name", name, *extra, TASKRUNNER_TEST_SETTINGS=SETTINGS)


def test_killed_workers_lose_no_fair_task_and_every_key_keeps_its_turns(r, spawn_worker):
    dispatch_many(fair_chaos_step, [{"k": f"key-{n % KEYS}", "id": n} for n in range(TASKS)])
    spawn(spawn_worker, "survivor")
    for round_ in range(2):
        doomed = spawn(spawn_worker, f"doomed-{round_}", "--no-scheduler")
        wait_for(lambda round_=round_: started(r) >= 1000 * (round_ + 1), 120)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)

    wait_for(lambda: r.hlen(fair_runs_key()) == TASKS, 300)

    runs = {int(task_id): int(count) for task_id, count in r.hgetall(fair_runs_key()).items()}
    assert sorted(runs) == list(range(TASKS))  # 0 lost
    starts = [key.decode() for key in r.lrange(fair_starts_key(), 0, -1)]
    # While every key has tasks waiting (the first 4,000 starts, each key has 250),
    # each window of 100 starts serves every key: none waits while the others run.
    for at in range(0, 4000, 100):
        assert len(set(starts[at:at + 100])) == KEYS, at
