"""A worker paused past WORKER_LOST_AFTER (SIGSTOP), declared lost, its messages taken by
the leader, then resumed (SIGCONT): it starts and acks none of them, and exits to be
started again (a child of `runtasks --processes` is replaced)."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from tests.chaos.harness import Chaos, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TIMEOUT = 120  # generous: the machine is shared and loaded
LOST_EXIT = 75  # worker/lost_workers.py


@pytest.fixture
def site(site: Callable[..., Chaos]) -> Callable[..., Chaos]:
    """The chaos site of tests/chaos/conftest.py, a worker lost after 3 s of silence."""
    return functools.partial(site, WORKER_LOST_AFTER=3, LEADER_LEASE=2)




def pending_count(chaos: Chaos) -> int:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    return int(broker.client.xpending(broker.stream("default"), broker.group)["pending"])


def held_by(chaos: Chaos, consumer: str) -> set[str]:
    import redis

    try:
        return chaos.held_by(consumer)
    except redis.ResponseError:  # NOGROUP: no worker read the stream yet
        return set()


def stop_while_holding(chaos: Chaos, pid: int, consumer: str, keys: set[str]
                       ) -> tuple[set[str], set[str]]:
    """SIGSTOP `pid` once it runs some tasks and holds more; (held, started) then: what it
    started may run again (one finished with its ack not sent yet, at least once)."""
    wait_until(lambda: len(held_by(chaos, consumer)) >= 6
               and sum(1 for key, by in chaos.started_by().items() if by == pid) >= 2,
               TIMEOUT, f"{consumer} to run 2 tasks and hold more\n{chaos.log_tail()}")
    os.kill(pid, signal.SIGSTOP)
    held = chaos.held_by(consumer)
    started = {key for key, by in chaos.started_by().items() if by == pid}
    return held, started


def assert_taken_over(chaos: Chaos, pid: int, keys: set[str], held: set[str],
                      started: set[str]) -> None:
    """What the paused process held and had not started ran once, elsewhere; only what
    it had started may have run twice (a paused run goes on; a finished one may not
    have been acked)."""
    runs, starts, started_by = chaos.runs(), chaos.starts(), chaos.started_by()
    assert all(runs.get(key, 0) >= 1 for key in keys), runs
    waiting = held - started
    assert waiting, "the paused worker held no message it had not started"
    assert {key: starts.get(key) for key in waiting} == dict.fromkeys(waiting, 1)
    assert all(started_by[key] != pid for key in waiting)
    assert all(runs[key] == 1 for key in keys - started), runs
    from django_taskrunner.models import FailedTask

    assert list(FailedTask.objects.all()) == []


def test_a_worker_back_after_being_declared_lost_runs_and_acks_nothing_and_exits(
        site: Any) -> None:
    from tests.testapp.process_tasks import proc_work

    chaos = site()
    paused = chaos.spawn("a", "--no-scheduler", "-c", "2", "--batch-size", "10",
                         "--prefetch-ms", "0")
    wait_until(lambda: "worker a started" in paused.log_text(), TIMEOUT, chaos.log_tail())
    proc_work.dispatch_many([{"n": n, "sleep": 1.5} for n in range(12)])
    keys = {str(n) for n in range(12)}
    held, started = stop_while_holding(chaos, paused.pid, "a", keys)
    try:
        leader = chaos.spawn("b", "-c", "8")  # leads: it declares "a" lost, takes its messages
        wait_until(lambda: chaos.all_ran(keys - started) and pending_count(chaos) == 0,
                   TIMEOUT, f"the paused worker's messages to run elsewhere\n"
                   f"{chaos.log_tail()}")
        assert "worker a is lost" in leader.log_text()
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    assert paused.proc.wait(TIMEOUT) == LOST_EXIT, chaos.log_tail()
    assert "worker a was declared lost while it was away" in paused.log_text()
    assert_taken_over(chaos, paused.pid, keys, held, started)
    assert pending_count(chaos) == 0

    # started again under the same name, it runs tasks as any worker (its mark cleared)
    again = chaos.spawn("a", "--no-scheduler", "-c", "2")
    assert leader.stop() == 0, chaos.log_tail()
    proc_work.dispatch_many([{"n": n} for n in range(100, 104)])
    wait_until(lambda: chaos.all_ran({str(n) for n in range(100, 104)}), TIMEOUT,
               chaos.log_tail())
    assert again.stop() == 0, chaos.log_tail()
    assert again.log_text().count("was declared lost while it was away") == 1


def test_a_child_back_after_being_declared_lost_is_replaced(site: Any) -> None:
    from tests.testapp.process_tasks import proc_work

    chaos = site()
    supervisor = chaos.spawn("sup", "--processes", "1", "--max-tasks-per-child", "1000",
                             "--no-scheduler", "-c", "2", "--batch-size", "10",
                             "--prefetch-ms", "0")
    wait_until(lambda: ") is ready (" in supervisor.log_text(), TIMEOUT, chaos.log_tail())
    pid = int(supervisor.log_text().split("started child 0 (pid ")[1].split(",")[0])
    proc_work.dispatch_many([{"n": n, "sleep": 1.5} for n in range(12)])
    keys = {str(n) for n in range(12)}
    held, started = stop_while_holding(chaos, pid, "sup-0.0", keys)
    try:
        chaos.spawn("b", "-c", "8")
        wait_until(lambda: chaos.all_ran(keys - started) and pending_count(chaos) == 0,
                   TIMEOUT, f"the paused child's messages to run elsewhere\n"
                   f"{chaos.log_tail()}")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: supervisor.log_text().count(") is ready (") >= 2, TIMEOUT,
               f"the child to be replaced\n{chaos.log_tail()}")
    assert f"exited with code {LOST_EXIT}: it was declared lost" in supervisor.log_text()
    assert_taken_over(chaos, pid, keys, held, started)
    assert supervisor.stop() == 0, chaos.log_tail()
