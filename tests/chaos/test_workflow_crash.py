"""A group callback fires exactly once across a worker crash: a group of 1,000 members
with a callback, on two real `runtasks` workers, one SIGKILLed while members run (some
finished and acked, some held, some counted in a batch it may or may not have sent) and
started again. Every member runs (the dead worker's are reclaimed and may run twice),
and the callback runs once, after the last of them."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Chaos, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

MEMBERS = 1000


@pytest.fixture
def chaos(tmp_path: Any, redis_url: str) -> Iterator[Chaos]:
    from django.db import connection

    from tests.testapp.workflow_tasks import wf_key

    with contextlib.ExitStack() as stack:
        chaos = stack.enter_context(scenarios.chaos_site(
            tmp_path, redis_url, str(connection.settings_dict["NAME"]),
            **scenarios.KILL_SETTINGS))
        yield chaos
        chaos.counter.delete(*(wf_key(kind) for kind in (
            "member-runs", "callback-runs", "callback-parent", "callback-pids")))


def member_runs(chaos: Chaos) -> dict[str, int]:
    from tests.testapp.workflow_tasks import wf_key

    raw = chaos.counter.hgetall(wf_key("member-runs"))
    return {key.decode(): int(value) for key, value in raw.items()}


def callback_runs(chaos: Chaos) -> int:
    from tests.testapp.workflow_tasks import wf_key

    return int(chaos.counter.get(wf_key("callback-runs")) or 0)


def test_a_group_callback_runs_once_when_a_worker_is_killed_mid_run(chaos: Chaos) -> None:
    from django_taskrunner import group, lookup_workflow
    from tests.testapp.workflow_tasks import wf_collect, wf_key, wf_member

    # Given two workers of 8 threads on a group of 1,000 members of 5 ms each
    victim = chaos.spawn("victim-1", "-c", "8")
    chaos.spawn("survivor", "-c", "8")
    wait_until(lambda: "started" in "".join(w.log.read_text() for w in chaos.workers), 30,
               "both workers to start")
    handle = group(*(wf_member.s({"n": n, "sleep": 0.005}) for n in range(MEMBERS)),
                   then=wf_collect.s({})).dispatch()

    # When the victim is killed once about a third of the members ran, then restarted
    wait_until(lambda: len(member_runs(chaos)) >= MEMBERS // 3, scenarios.TIMEOUT,
               f"a third of the members to run\n{chaos.log_tail()}")
    victim.kill(signal.SIGKILL)
    victim.proc.wait(10)
    restarted = chaos.spawn("victim-2", "-c", "8")
    # (started for good: a SIGTERM before its handlers are installed would kill it)
    wait_until(lambda: "started" in restarted.log.read_text(), 60, "the restarted worker")

    # Then every member ran, the workflow finished, and the callback ran exactly once
    wait_until(lambda: callback_runs(chaos) >= 1, scenarios.TIMEOUT,
               f"the callback to run\n{chaos.log_tail()}")
    record = wait_until(lambda: (lambda rec: rec if rec and rec.finished else None)(
        lookup_workflow(handle.id)), 30, "the workflow to finish")
    runs = member_runs(chaos)
    assert set(runs) == {str(n) for n in range(MEMBERS)}, chaos.log_tail()
    # the queue drains: nothing else can still dispatch the callback again
    wait_until(scenarios_queue_is_empty, 60, "the queue to empty")
    assert callback_runs(chaos) == 1, chaos.log_tail()
    assert record.status == "succeeded"
    assert (record.succeeded, record.failed) == (MEMBERS + 1, 0)
    assert json.loads(chaos.counter.get(wf_key("callback-parent"))) == list(range(MEMBERS))
    print(f"workflow-crash members={MEMBERS} ran_twice="
          f"{sum(1 for count in runs.values() if count > 1)}")
    assert set(chaos.stop_all().values()) <= {0}, chaos.log_tail()


def scenarios_queue_is_empty() -> bool:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    return broker.length("default") == 0 and broker.pending("default") == 0
