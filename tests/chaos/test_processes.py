"""`runtasks --processes`: real supervisors and children against a private Redis.

Children are found through the supervisor's log, which names each one's slot, pid and
consumer (`<name>-<slot>.<generation>`); tasks count their starts and runs in the
counter Redis (tests/testapp/process_tasks.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import time
from typing import Any

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Chaos, WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TIMEOUT = 120  # generous: the machine is shared and loaded
CHILD = re.compile(r"started child (\d+) \(pid (\d+), consumer (\S+)\)")




def children(worker: WorkerProcess) -> list[tuple[int, int, str]]:
    """(slot, pid, consumer) of every child the supervisor logged starting, in order."""
    return [(int(slot), int(pid), consumer)
            for slot, pid, consumer in CHILD.findall(worker.log_text())]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def ready_count(worker: WorkerProcess) -> int:
    return worker.log_text().count(") is ready (")


def start(chaos: Chaos, *args: str, ready: int = 2) -> WorkerProcess:
    worker = chaos.spawn("sup", *args)
    wait_until(lambda: ready_count(worker) >= ready or not worker.alive(), TIMEOUT,
               f"{ready} ready children\n{chaos.log_tail()}")
    assert worker.alive(), chaos.log_tail()
    return worker


def dispatch(task: Any, numbers: range, **extra: Any) -> set[str]:
    task.dispatch_many([{"n": n, **extra} for n in numbers])
    return {str(n) for n in numbers}


def failed_rows() -> list[Any]:
    from django_taskrunner.models import FailedTask

    return list(FailedTask.objects.all())


def restart_times(chaos: Chaos, keys: set[str], victims: set[int], since: float
                  ) -> list[float]:
    """Seconds from `since` (a kill of the `victims` pids) until each key of `keys` that
    the victims had not finished started in another process (polled every 10 ms)."""
    finished = chaos.done_by()  # the victims are dead: they finish nothing more
    waiting = {key for key in keys if finished.get(key) not in victims}
    times: dict[str, float] = {}

    def all_restarted() -> bool:
        started_by = chaos.started_by()
        for key in waiting - set(times):
            if key in started_by and started_by[key] not in victims:
                times[key] = time.monotonic() - since
        return len(times) == len(waiting)

    if waiting:
        wait_until(all_restarted, TIMEOUT, f"the messages of a killed child to start again\n"
                   f"{chaos.log_tail()}", step=0.01)
    return sorted(times.values())


def test_a_sigkilled_childs_messages_start_again_at_once_and_sigterm_drains(site: Any) -> None:
    from tests.testapp.process_tasks import proc_work

    chaos = site()
    worker = start(chaos, "--processes", "2", "-c", "8", "--batch-size", "1",
                   "--prefetch-ms", "0")
    keys = dispatch(proc_work, range(8), sleep=2)
    wait_until(lambda: len(chaos.starts()) >= 8, TIMEOUT, "every task to start")
    by_consumer = {consumer: chaos.held_by(consumer) for _slot, _pid, consumer in
                   children(worker)}
    victim_consumer = max(by_consumer, key=lambda consumer: len(by_consumer[consumer]))
    victim = next(pid for _slot, pid, consumer in children(worker)
                  if consumer == victim_consumer)
    held = by_consumer[victim_consumer]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    times = restart_times(chaos, held, {victim}, killed)
    print(f"child SIGKILLed holding {len(held)} running task(s): kill to start again "
          f"p50 {statistics.median(times):.3f}s max {times[-1]:.3f}s")
    # No bound on the time itself (a loaded machine is slow): restart_times waited at most
    # TIMEOUT (120 s), under RESERVATION_TIMEOUT (300 s), so they were handed back, not
    # reclaimed; the figure is printed against the 1 s goal.
    assert TIMEOUT < scenarios.PROCESS_SETTINGS["RESERVATION_TIMEOUT"]
    wait_until(lambda: chaos.all_ran(keys), TIMEOUT, f"every task to run\n{chaos.log_tail()}")
    wait_until(lambda: ready_count(worker) >= 3, TIMEOUT, "the replacement to be ready")
    assert worker.stop() == 0, chaos.log_tail()
    assert "every child drained; stopped" in worker.log_text()
    assert not any(alive(pid) for _slot, pid, _consumer in children(worker))
    runs = chaos.runs()
    assert all(runs[key] == 1 for key in keys - held), runs
    assert failed_rows() == []  # the killed attempts were retried (max_retry=5)


def test_a_segfaulting_task_fails_after_its_retries_and_a_stuck_one_is_ended(
        site: Any) -> None:
    from tests.testapp.process_tasks import proc_segfault, proc_stuck, proc_work

    chaos = site(TIME_LIMIT_GRACE=1)
    worker = start(chaos, "--processes", "2", "-c", "1", "--batch-size", "1",
                   "--prefetch-ms", "0")
    others = dispatch(proc_work, range(30), sleep=0.05)
    proc_segfault.dispatch({"n": "segv"})
    proc_stuck.dispatch({"n": "stuck"})
    wait_until(lambda: len(failed_rows()) >= 2 and chaos.all_ran(others), TIMEOUT,
               f"two failed rows and every other task\n{chaos.log_tail()}")
    rows = {row.task_name.rpartition(".")[2]: row for row in failed_rows()}
    assert set(rows) == {"proc_segfault", "proc_stuck"}
    segv = rows["proc_segfault"]
    assert "WorkerLost" in segv.error and "SIGSEGV" in segv.error, segv.error
    assert segv.attempts == 3
    assert chaos.starts()["segv"] == 3, chaos.log_tail()  # max_retry=2: three attempts, no more
    stuck = rows["proc_stuck"]
    assert "TimeLimitExceeded" in stuck.error, stuck.error
    assert chaos.starts()["stuck"] == 1
    runs = chaos.runs()
    assert all(runs[key] == 1 for key in others), runs  # -c 1: no bystander was running
    wait_until(lambda: ready_count(worker) >= 6, TIMEOUT, "every replacement to be ready")
    assert worker.stop() == 0, chaos.log_tail()


def test_children_leaking_memory_are_recycled_without_losing_or_repeating_a_task(
        site: Any) -> None:
    from tests.testapp.process_tasks import proc_leak

    chaos = site()
    worker = start(chaos, "--processes", "2", "-c", "2", "--batch-size", "2",
                   "--prefetch-ms", "0", "--max-memory-per-child", "150")
    keys = dispatch(proc_leak, range(80))  # 400 MB in all
    wait_until(lambda: chaos.all_ran(keys), TIMEOUT, f"every task to run\n{chaos.log_tail()}")
    assert worker.stop() == 0, chaos.log_tail()
    runs = chaos.runs()
    assert all(runs[key] == 1 for key in keys), {k: v for k, v in runs.items() if v != 1}
    assert failed_rows() == []
    largest = max(chaos.counter.zrange(f"{chaos.prefix}:chaos:resident", 0, -1,
                                       withscores=True), key=lambda pair: pair[1])[1]
    print(f"largest resident size of a child: {largest / 2**20:.0f} MB (limit 150 MB)")
    # over the limit by at most the task that crossed it and what it held when it
    # paused (2 running, 2 fetched), 5 MB each, and the allocator's slack
    assert largest < (150 + 5 * 5 + 20) * 2**20
    assert worker.log_text().count("starting its replacement first") >= 2


def test_children_that_keep_dying_at_start_up_stop_the_supervisor(site: Any) -> None:
    chaos = site()
    worker = chaos.spawn("sup", "--processes", "2", settings="tests.chaos.settings_child_fails")
    assert worker.proc.wait(TIMEOUT) != 0
    log = worker.log_text()
    assert "died before it was ready 3 times in a row" in log, log[-3000:]
    assert "refuse to load in a child process" in log


def test_sighup_replaces_every_child_one_at_a_time_losing_nothing(site: Any) -> None:
    from tests.testapp.process_tasks import proc_work

    chaos = site()
    worker = start(chaos, "--processes", "2", "-c", "2")
    keys = dispatch(proc_work, range(300), sleep=0.02)
    wait_until(lambda: len(chaos.starts()) >= 10, TIMEOUT, "tasks to start")
    worker.kill(signal.SIGHUP)
    wait_until(lambda: ready_count(worker) >= 4, TIMEOUT, f"two fresh children\n"
               f"{chaos.log_tail()}")
    wait_until(lambda: chaos.all_ran(keys), TIMEOUT, f"every task to run\n{chaos.log_tail()}")
    assert worker.stop() == 0, chaos.log_tail()
    consumers = [consumer for _slot, _pid, consumer in children(worker)]
    assert consumers == ["sup-0.0", "sup-1.0", "sup-0.1", "sup-1.1"], consumers
    runs = chaos.runs()
    assert all(runs[key] == 1 for key in keys), {k: v for k, v in runs.items() if v != 1}
    assert failed_rows() == []


def test_burst_with_processes_drains_in_every_child_then_exits_0(site: Any) -> None:
    from tests.testapp.process_tasks import proc_work

    chaos = site()
    keys = dispatch(proc_work, range(200))
    worker = chaos.spawn("sup", "--processes", "2", "--burst")
    assert worker.proc.wait(TIMEOUT) == 0, chaos.log_tail()
    assert chaos.all_ran(keys)
    assert worker.log_text().count("burst: every queue is empty, stopping") == 2
    assert "every child drained; stopped" in worker.log_text()


def test_eager_mode_changes_nothing_for_the_children_of_runtasks(site: Any) -> None:
    from tests.testapp.process_tasks import proc_work

    chaos = site()
    keys = dispatch(proc_work, range(20))  # dispatched here with EAGER off: on the stream
    chaos.overrides["EAGER"] = True  # the runtasks below runs with EAGER on
    worker = chaos.spawn("sup", "--processes", "2", "--burst")
    assert worker.proc.wait(TIMEOUT) == 0, chaos.log_tail()
    runs = chaos.runs()
    assert all(runs[key] == 1 for key in keys)
    assert "TASKRUNNER['EAGER'] is on" in worker.log_text()


def test_chaos_children_killed_every_two_seconds_then_the_whole_runtasks(site: Any) -> None:
    """--processes 3 and a second runtasks beside it; a random child SIGKILLed every 2 s,
    then the whole first runtasks: nothing lost, only what ran at a kill runs twice."""
    import random

    from tests.testapp.process_tasks import proc_work

    chaos = site(WORKER_LOST_AFTER=3, LEADER_LEASE=2)
    worker = start(chaos, "--processes", "3", "-c", "4", ready=3)
    keys = dispatch(proc_work, range(3000), sleep=0.08)
    beside = chaos.spawn("beside", "-c", "16")
    exposed: set[str] = set()  # held by a process at the moment it was killed
    fetched_times: list[float] = []  # messages a killed child had fetched, not started
    running_times: list[float] = []  # those it was running: a failed attempt, retried
    for _kill in range(3):
        time.sleep(2)
        live = [(pid, consumer) for _slot, pid, consumer in children(worker) if alive(pid)]
        pid, consumer = random.choice(live)  # noqa: S311 - a test's choice, not a secret
        held, before = chaos.held_by(consumer), chaos.starts()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        exposed |= held
        running = {key for key in held if before.get(key, 0) > 0}
        fetched_times += restart_times(chaos, held - running, {pid}, killed)
        running_times += restart_times(chaos, running, {pid}, killed)
    # the whole first runtasks: its supervisor and every child at once
    victims = [(pid, consumer) for _slot, pid, consumer in children(worker) if alive(pid)]
    held = set().union(*(chaos.held_by(consumer) for _pid, consumer in victims))
    killed = time.monotonic()
    worker.kill(signal.SIGKILL)
    for pid, _consumer in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    exposed |= held
    whole_times = restart_times(chaos, held, {worker.pid, *(pid for pid, _ in victims)}, killed)
    wait_until(lambda: chaos.all_ran(keys), TIMEOUT * 2, f"every task to run\n"
               f"{chaos.log_tail()}")
    assert beside.stop() == 0, chaos.log_tail()

    def figures(times: list[float]) -> str:
        if not times:
            return "none held"
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        return (f"p50 {statistics.median(times):.3f}s p99 {p99:.3f}s max {times[-1]:.3f}s "
                f"({len(times)} messages)")

    runs = chaos.runs()
    duplicated = {key for key in keys if runs.get(key, 0) > 1}
    print(f"\nchild kills, kill to start again: fetched {figures(sorted(fetched_times))}; "
          f"running {figures(sorted(running_times))}")
    print(f"whole runtasks killed, kill to start again: {figures(whole_times)} "
          f"(WORKER_LOST_AFTER=3, LEADER_LEASE=2)")
    print(f"lost 0 of {len(keys)}; run twice: {len(duplicated)}, all held at a kill")
    assert all(runs.get(key, 0) >= 1 for key in keys)
    assert duplicated <= exposed, duplicated - exposed
    assert failed_rows() == []
