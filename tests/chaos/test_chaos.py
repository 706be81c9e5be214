"""The chaos suite: real `runtasks` processes and a private Redis, harmed on purpose.
Every case ends with each dispatched task run at least once.

CI figures are small enough for a 2-core machine; TASKRUNNER_CHAOS_FULL=1 runs the full
ones (the same as `python bench/chaos.py`, which prints the figures).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Chaos

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

FULL = os.environ.get("TASKRUNNER_CHAOS_FULL") == "1"


@pytest.fixture
def site(tmp_path: Any, redis_url: str) -> Iterator[Callable[..., Chaos]]:
    """Opens a chaos site: a private Redis (AOF optional), run counts in the test Redis."""
    from django.db import connection

    with contextlib.ExitStack() as stack:

        def open_site(appendonly: bool = False, **overrides: Any) -> Chaos:
            return stack.enter_context(scenarios.chaos_site(
                tmp_path, redis_url, str(connection.settings_dict["NAME"]),
                appendonly=appendonly, **overrides))

        yield open_site


def check_stopped_cleanly(chaos: Chaos) -> None:
    codes = chaos.stop_all()
    assert set(codes.values()) <= {0}, f"{codes}\n{chaos.log_tail()}"


def test_sigkilled_worker_restarted_three_times_loses_nothing(site: Any) -> None:
    chaos = site(**scenarios.KILL_SETTINGS)
    result = scenarios.kill_workers(chaos, tasks=5000, kills=3)
    print(result.line())
    assert result.lost == 0, chaos.log_tail()
    assert result.failed_rows == 0
    assert len(result.recover_seconds) == 3
    # at most what was running or finished-but-unacked at each kill runs twice
    assert result.duplicates <= 3 * 30
    assert result.notes["dead_consumers_removed"] == 3
    check_stopped_cleanly(chaos)


def test_a_task_longer_than_its_reservation_timeout_runs_once(site: Any) -> None:
    overrides = {"RESERVATION_TIMEOUT": 5} if FULL else scenarios.LONG_TASK_SETTINGS
    chaos = site(**overrides)
    result = scenarios.long_task(chaos, seconds=60 if FULL else 8)
    print(result.line())
    assert result.lost == 0
    assert result.notes["starts"] == 1, chaos.log_tail()
    assert result.duplicates == 0
    check_stopped_cleanly(chaos)


def test_redis_down_for_seconds_and_restarted_from_its_aof_loses_nothing(site: Any) -> None:
    chaos = site(appendonly=True, **scenarios.OUTAGE_SETTINGS)
    result = scenarios.redis_outage(chaos, tasks=2000, outage=10 if FULL else 5)
    print(result.line())
    assert result.lost == 0, chaos.log_tail()
    assert result.failed_rows == 0
    assert result.notes["workers_alive"]
    assert result.notes["dispatch_failed_in_s"] < 3
    # Not asserted: how many tasks finished while Redis was down ("ran_while_down" in the
    # line printed above). Those running at the kill finish, but none starts once a
    # worker's acks cannot reach Redis (docs/guarantees.md), so the count is whatever the
    # timing of the kill leaves: 0 under load (seen in CI), a few on a quieter machine.
    check_stopped_cleanly(chaos)


def test_sigterm_lets_the_in_flight_tasks_finish_and_the_rest_go_elsewhere(site: Any) -> None:
    chaos = site()
    # 6 s tasks: none may finish between the 50th start and the SIGTERM (a finished one
    # would free a thread for a buffered task), however busy the machine
    result = scenarios.sigterm_in_flight(chaos, in_flight=50, rest=30, sleep=6.0)
    print(result.line())
    assert result.notes["exit_code"] == 0, chaos.log_tail()
    assert result.notes["in_flight_at_sigterm"] == 50
    assert result.notes["finished_by_leaving"] == 50
    assert result.notes["run_by_other"] == 30
    assert result.lost == 0 and result.duplicates == 0
    check_stopped_cleanly(chaos)


def test_a_poison_task_is_recorded_failed_and_the_queue_behind_it_drains(site: Any) -> None:
    from django_taskrunner.models import FailedTask

    chaos = site(**scenarios.POISON_SETTINGS)
    result = scenarios.poison(chaos, good=50)
    print(result.line())
    assert result.lost == 0, chaos.log_tail()
    # max_retry=1: one delivery that may not have started is not charged, so the poison
    # runs max_retry + 2 times at most; each run killed a worker
    assert result.notes["poison_runs"] == 3
    assert result.kills == 3
    [row] = FailedTask.objects.all()
    assert row.error_class == "django_taskrunner.exceptions.WorkerLost"
    assert row.task_name == "tests.testapp.chaos_tasks.chaos_poison"
    check_stopped_cleanly(chaos)


def test_garbage_entries_become_failed_rows_and_the_worker_never_restarts(site: Any) -> None:
    chaos = site()
    result = scenarios.garbage(chaos, good=1000)
    print(result.line())
    assert result.lost == 0 and result.duplicates == 0, chaos.log_tail()
    assert result.failed_rows == 20
    assert result.notes["worker_alive"]
    [worker] = chaos.workers
    check_stopped_cleanly(chaos)
    assert worker.proc.returncode == 0
