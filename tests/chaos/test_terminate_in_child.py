"""`cancel(id, terminate=True)` of a sync task running in a child of `runtasks
--processes 2`: the child is ended and replaced, the task recorded cancelled and not
retried, the child's other messages run again elsewhere without an attempt counted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.harness import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TIMEOUT = 120  # generous: the machine is shared and loaded




def test_terminate_ends_the_child_records_cancelled_and_hands_the_rest_back(site: Any) -> None:
    from django_taskrunner import cancel, lookup
    from django_taskrunner.models import FailedTask
    from tests.testapp.process_tasks import proc_blocks, proc_work

    chaos = site()
    worker = chaos.spawn("sup", "--processes", "2", "-c", "2", "--batch-size", "2",
                         "--prefetch-ms", "0")
    wait_until(lambda: worker.log_text().count(") is ready (") >= 2, TIMEOUT, chaos.log_tail())
    blocker = proc_blocks.dispatch({"n": "blocker"})
    others = proc_work.dispatch_many([{"n": n, "sleep": 0.5} for n in range(20)])
    wait_until(lambda: "blocker" in chaos.started_by(), TIMEOUT, chaos.log_tail())
    victim = chaos.started_by()["blocker"]

    assert cancel(blocker.id, terminate=True) is True

    wait_until(lambda: (record := lookup(blocker.id)) is not None
               and record.status == "cancelled", TIMEOUT, chaos.log_tail())
    wait_until(lambda: chaos.all_ran({str(n) for n in range(20)}), TIMEOUT, chaos.log_tail())
    wait_until(lambda: worker.log_text().count(") is ready (") >= 3, TIMEOUT,
               f"the ended child's replacement\n{chaos.log_tail()}")
    log = worker.log_text()
    assert f"(pid {victim}," in log and "ended for cancel(terminate=True)" in log, log
    assert chaos.starts()["blocker"] == 1  # max_retry=3, but a cancel is not retried
    assert "blocker" not in chaos.runs()
    assert lookup(blocker.id).attempt == 1
    runs = chaos.runs()
    # -c 2 and the blocker on one thread: at most one other task was running (or had just
    # finished, its ack not sent) in the ended child; only that one may run twice
    assert all(runs[str(n)] >= 1 for n in range(20)), runs
    assert sum(runs[str(n)] - 1 for n in range(20)) <= 1, runs
    # the ended child's other messages ran again without an attempt counted
    assert {lookup(message.id).attempt for message in others} == {1}
    assert list(FailedTask.objects.all()) == []
    assert worker.stop() == 0, chaos.log_tail()
