"""Durable steps across worker crashes: 500 tasks of three steps each, every task failing
once after its second step, on two real `runtasks` workers, one SIGKILLed at random
moments and started again. Every step of every task appears in the log exactly once,
except a step whose process died inside its `fn` after the side effect and before its
result was kept: that one appears again (by another process), as docs/steps.md says."""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Chaos, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TASKS = 500
KILLS = 3
STEPS = ("a", "b", "c")


@pytest.fixture
def chaos(tmp_path: Any, redis_url: str) -> Iterator[Chaos]:
    from django.db import connection

    from tests.testapp.step_tasks import chaos_step_key

    with contextlib.ExitStack() as stack:
        chaos = stack.enter_context(scenarios.chaos_site(
            tmp_path, redis_url, str(connection.settings_dict["NAME"]),
            **scenarios.KILL_SETTINGS))
        yield chaos
        chaos.counter.delete(*(chaos_step_key(kind) for kind in (
            "enter", "log", "failed-once", "done")))


def entries(chaos: Chaos, kind: str) -> list[tuple[str, str, int]]:
    from tests.testapp.step_tasks import chaos_step_key

    out = []
    for raw in chaos.counter.lrange(chaos_step_key(kind), 0, -1):
        n, step, pid = raw.decode().split(":")
        out.append((n, step, int(pid)))
    return out


def done(chaos: Chaos) -> set[str]:
    from tests.testapp.step_tasks import chaos_step_key

    return {n.decode() for n in chaos.counter.smembers(chaos_step_key("done"))}


def test_each_step_runs_once_across_kills_and_retries(chaos: Chaos) -> None:
    from django_taskrunner.models import FailedTask
    from tests.testapp.step_tasks import chaos_three_steps

    rng = random.Random()
    chaos_three_steps.dispatch_many({"n": n, "sleep": 0.03} for n in range(TASKS))
    victim = chaos.spawn("victim-1", "-c", "4")
    chaos.spawn("survivor", "-c", "4")
    killed: set[int] = set()
    for kill in range(1, KILLS + 1):
        # Kill at a random moment while the victim runs steps, once the orphans of the
        # previous kill finished (a task killed mid-run twice would rightly be WorkerLost)
        orphans = {n for n, _s, pid in entries(chaos, "enter") if pid in killed} - done(chaos)
        wait_until(lambda o=orphans: o <= done(chaos), scenarios.TIMEOUT,
                   f"the orphans of kill {kill - 1}\n{chaos.log_tail()}")
        pid = victim.pid
        wait_until(lambda p=pid: (sum(1 for e in entries(chaos, "log") if e[2] == p) >= 3
                                  or len(done(chaos)) > TASKS * 0.9),
                   scenarios.TIMEOUT, f"victim-{kill} to be busy\n{chaos.log_tail()}")
        if len(done(chaos)) > TASKS * 0.9:
            break  # too little work left to kill in
        time.sleep(rng.uniform(0.0, 0.3))  # a random moment of its work
        victim.kill(signal.SIGKILL)
        victim.proc.wait(10)
        killed.add(pid)
        victim = chaos.spawn(f"victim-{kill + 1}", "-c", "4")

    wait_until(lambda: len(done(chaos)) == TASKS, scenarios.TIMEOUT,
               f"every task to finish\n{chaos.log_tail()}")

    log = entries(chaos, "log")
    counts = Counter((n, step) for n, step, _pid in log)
    assert set(counts) == {(str(n), step) for n in range(TASKS) for step in STEPS}
    # A step logged twice: its first run's process was killed after the side effect and
    # before the step's result was kept (inside fn, as far as the task can tell)
    repeated = {key for key, count in counts.items() if count > 1}
    for key in repeated:
        runs = [pid for n, step, pid in log if (n, step) == key]
        assert all(pid in killed for pid in runs[:-1]), (key, runs, killed)
        assert runs[-1] not in killed or len(runs) == 1
    died_before = {(n, s) for n, s, pid in entries(chaos, "enter") if pid in killed} - {
        (n, s) for n, s, pid in log if pid in killed}
    print(f"\nsteps: {TASKS * len(STEPS)} kept; kills={len(killed)}; "
          f"died inside fn before its side effect: {len(died_before)}; "
          f"died inside fn after it (logged twice): {len(repeated)}")
    assert len(repeated) <= len(killed) * 4  # at most one step per thread of a victim
    assert not FailedTask.objects.exists()
