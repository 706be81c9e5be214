"""The six chaos cases. Each dispatches tasks, does harm to real worker processes or to
Redis, waits until every task ran, and returns what it saw as a `Result`.

The tests in this folder run them with CI figures and assert; bench/chaos.py runs them
with the full figures and prints the results.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.chaos.harness import Chaos, PrivateRedis, wait_until

TIMEOUT = 120.0  # the longest any case waits for its tasks


@dataclass
class Result:
    """What one case saw; `lost` must be 0 for the case to pass."""

    case: str
    tasks: int
    lost: int = 0
    duplicates: int = 0
    kills: int = 0
    failed_rows: int = 0
    recover_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        recover = ", ".join(f"{s:.1f}" for s in self.recover_seconds) or "-"
        notes = "; ".join(f"{k}={v}" for k, v in self.notes.items())
        return (f"{self.case:<10} tasks={self.tasks:<5} kills={self.kills} lost={self.lost} "
                f"duplicates={self.duplicates} failed_rows={self.failed_rows} "
                f"recover_s=[{recover}] wall_s={self.seconds:.1f}  {notes}")


@contextlib.contextmanager
def chaos_site(workdir: Path, counter_url: str, db_name: str, *, appendonly: bool = False,
               **overrides: Any) -> Iterator[Chaos]:
    """A private Redis and a Chaos on it, with this process's TASKRUNNER pointed at it."""
    from django.test.utils import override_settings

    broker = PrivateRedis(workdir, appendonly=appendonly)
    broker.start()
    chaos = Chaos(broker, counter_url, f"chaos-{uuid.uuid4().hex[:8]}", db_name, workdir,
                  **overrides)
    try:
        with override_settings(TASKRUNNER=chaos.settings()):
            yield chaos
    finally:
        chaos.close()
        broker.stop()


def dispatch_work(count: int, sleep: float = 0.0, start: int = 0) -> None:
    from tests.testapp.chaos_tasks import chaos_work

    for first in range(start, start + count, 1000):
        last = min(first + 1000, start + count)
        chaos_work.dispatch_many({"n": n, "sleep": sleep} for n in range(first, last))


def tally(result: Result, chaos: Chaos, keys: set[str]) -> Result:
    runs = chaos.runs()
    result.lost = sum(1 for key in keys if runs.get(key, 0) == 0)
    result.duplicates = sum(runs.get(key, 0) - 1 for key in keys if runs.get(key, 0) > 1)
    result.failed_rows = failed_rows()
    return result


def failed_rows() -> int:
    from django_taskrunner.models import FailedTask

    return FailedTask.objects.count()


def all_ran(chaos: Chaos, keys: set[str]) -> Callable[[], bool]:
    return lambda: chaos.ran_count() >= len(keys) and chaos.all_ran(keys)


def queue_is_empty() -> bool:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    return broker.length("default") == 0 and broker.pending("default") == 0


# -- 1. workers killed with SIGKILL --------------------------------------------------

KILL_SETTINGS = {"RESERVATION_TIMEOUT": 3, "DEAD_CONSUMER_TIMEOUT": 2}
# The chaos tests of `runtasks --processes`: a dead child's messages must come back
# through its supervisor or the lost-worker watch, never by waiting for this.
PROCESS_SETTINGS = {"RESERVATION_TIMEOUT": 300}


def kill_workers(chaos: Chaos, *, tasks: int = 5000, kills: int = 3, sleep: float = 0.02,
                 concurrency: int = 4) -> Result:
    """Two workers; one is SIGKILLed `kills` times during the run and started again.

    Each kill waits until the messages the previous one orphaned have run again (the
    time that took is the recovery time) and the new victim is busy, so no task is
    killed mid-run twice: that would rightly make it a failed task (see WorkerLost).
    """
    result, keys = Result("kill", tasks, kills=kills), {str(n) for n in range(tasks)}
    dispatch_work(tasks, sleep)
    started = time.monotonic()
    victim = chaos.spawn("victim-1", "-c", str(concurrency))
    chaos.spawn("survivor", "-c", str(concurrency))
    orphaned: set[str] = set()
    killed_at = started  # set by each kill before the next one reads it
    for kill in range(1, kills + 1):
        if kill > 1:
            wait_until(lambda held=orphaned: chaos.all_ran(held), TIMEOUT,
                       f"the orphans of kill {kill - 1}\n{chaos.log_tail()}", step=0.01)
            result.recover_seconds.append(time.monotonic() - killed_at)
            time.sleep(0.5)  # let their acks be sent
        wait_until(lambda pid=victim.pid: chaos.runs_by(pid) >= 20, TIMEOUT,
                   f"victim-{kill} to be busy", step=0.01)
        if chaos.ran_count() > tasks * 0.9:
            raise AssertionError("the run ended before the kills: give the tasks more `sleep`")
        victim.kill(signal.SIGKILL)
        victim.proc.wait(10)
        killed_at, orphaned = time.monotonic(), chaos.held_by(victim.name)
        result.notes.setdefault("orphaned", []).append(len(orphaned))
        victim = chaos.spawn(f"victim-{kill + 1}", "-c", str(concurrency))
    wait_until(lambda: chaos.all_ran(orphaned), TIMEOUT, f"the orphans of kill {kills}")
    result.recover_seconds.append(time.monotonic() - killed_at)
    wait_until(all_ran(chaos, keys), TIMEOUT, f"every task\n{chaos.log_tail()}")
    result.seconds = time.monotonic() - started
    wait_until(queue_is_empty, 30, "the queue to empty")
    gone = wait_until(lambda: dead_consumers_removed(chaos, kills), 30,
                      "dead consumers to be removed")
    result.notes["dead_consumers_removed"] = gone
    return tally(result, chaos, keys)


def dead_consumers_removed(chaos: Chaos, kills: int) -> int:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    client = redis.Redis.from_url(chaos.broker.url)
    try:
        names = {c["name"].decode() for c in client.xinfo_consumers(broker.stream("default"),
                                                                      broker.group)}
    finally:
        client.close()
    dead = {f"victim-{k}" for k in range(1, kills + 1)}
    return kills if not names & dead else 0


# -- 2. a task far longer than its reservation timeout --------------------------------

LONG_TASK_SETTINGS = {"RESERVATION_TIMEOUT": 2}


def long_task(chaos: Chaos, *, seconds: float = 8.0) -> Result:
    """One task running `seconds` with two live workers: started once, never reclaimed."""
    result = Result("long-task", 1)
    dispatch_work(1, seconds)
    started = time.monotonic()
    chaos.spawn("a", "-c", "2")
    chaos.spawn("b", "-c", "2")
    wait_until(all_ran(chaos, {"0"}), seconds + TIMEOUT, f"the long task\n{chaos.log_tail()}")
    result.seconds = time.monotonic() - started
    result.notes["starts"] = chaos.starts().get("0", 0)
    result.notes["reclaimed"] = result.notes["starts"] - 1
    wait_until(queue_is_empty, 30, "the queue to empty")
    return tally(result, chaos, {"0"})


# -- 3. Redis stopped and started again -----------------------------------------------

OUTAGE_SETTINGS = {"RESERVATION_TIMEOUT": 5}


def redis_outage(chaos: Chaos, *, tasks: int = 3000, sleep: float = 0.01,
                 outage: float = 10.0) -> Result:
    """Redis is SIGKILLed mid-run, stays down `outage` seconds, restarts from its AOF."""
    from django_taskrunner import RedisUnavailable, dispatch

    result, keys = Result("outage", tasks), {str(n) for n in range(tasks)}
    dispatch_work(tasks, sleep)
    dispatched = time.monotonic()
    workers = [chaos.spawn("a", "-c", "4"), chaos.spawn("b", "-c", "4")]
    wait_until(lambda: chaos.ran_count() >= tasks // 4, TIMEOUT, "progress before the outage")
    time.sleep(max(0.0, 1.5 - (time.monotonic() - dispatched)))  # past appendfsync everysec
    chaos.broker.kill()
    down_at, ran_at_kill = time.monotonic(), chaos.ran_count()
    try:
        dispatch("tests.testapp.chaos_tasks.chaos_work", {"n": "never"})
    except RedisUnavailable:
        result.notes["dispatch_failed_in_s"] = round(time.monotonic() - down_at, 3)
    time.sleep(max(0.0, outage - (time.monotonic() - down_at)))
    ran_while_down = chaos.ran_count() - ran_at_kill
    chaos.broker.start()
    up_at, ran_at_restart = time.monotonic(), chaos.ran_count()
    wait_until(lambda: chaos.ran_count() > ran_at_restart or all_ran(chaos, keys)(), TIMEOUT,
               f"progress after the outage\n{chaos.log_tail()}", step=0.01)
    result.recover_seconds.append(time.monotonic() - up_at)
    wait_until(all_ran(chaos, keys), TIMEOUT, f"every task\n{chaos.log_tail()}")
    result.seconds = time.monotonic() - dispatched
    result.notes["ran_while_down"] = ran_while_down
    result.notes["workers_alive"] = all(worker.alive() for worker in workers)
    wait_until(queue_is_empty, 30, "the queue to empty")
    return tally(result, chaos, keys)


# -- 4. SIGTERM with tasks in flight --------------------------------------------------

def sigterm_in_flight(chaos: Chaos, *, in_flight: int = 50, rest: int = 30,
                      sleep: float = 3.0, batch: int = 10) -> Result:
    """A worker with `in_flight` running tasks (and a full buffer) gets SIGTERM; another
    worker is started at the same moment, for the tasks dispatched after and the rest."""
    tasks = in_flight + rest
    result, keys = Result("sigterm", tasks), {str(n) for n in range(tasks)}
    dispatch_work(in_flight + batch, sleep)
    started = time.monotonic()
    leaving = chaos.spawn("leaving", "-c", str(in_flight), "--batch-size", str(batch))
    wait_until(lambda: _count(chaos.started_by(), leaving.pid) >= in_flight, TIMEOUT,
               f"{in_flight} tasks in flight\n{chaos.log_tail()}", step=0.01)
    dispatch_work(rest - batch, sleep, start=in_flight + batch)  # its buffer is full
    staying = chaos.spawn("staying", "-c", str(rest))
    running = set(chaos.started_by()) - set(chaos.done_by())
    leaving.kill(signal.SIGTERM)
    result.notes["exit_code"] = leaving.proc.wait(60)
    wait_until(all_ran(chaos, keys), TIMEOUT, f"every task\n{chaos.log_tail()}")
    result.seconds = time.monotonic() - started
    done_by = chaos.done_by()
    result.notes["in_flight_at_sigterm"] = len(running)
    result.notes["finished_by_leaving"] = sum(1 for key in running
                                              if done_by.get(key) == leaving.pid)
    result.notes["run_by_other"] = _count(done_by, staying.pid)
    return tally(result, chaos, keys)


def _count(by_pid: dict[str, int], pid: int) -> int:
    return sum(1 for value in by_pid.values() if value == pid)


# -- 5. a poison task that kills its worker -------------------------------------------

POISON_SETTINGS = {"RESERVATION_TIMEOUT": 1}


def poison(chaos: Chaos, *, good: int = 50) -> Result:
    """A task that SIGKILLs its own worker, with `good` tasks queued behind it; dead
    workers are started again, as a process supervisor would."""
    from tests.testapp.chaos_tasks import chaos_poison

    result, keys = Result("poison", good), {str(n) for n in range(good)}
    chaos_poison.dispatch({"n": "poison"})
    dispatch_work(good, 0.01)
    started = time.monotonic()
    workers = {name: chaos.spawn(f"{name}-1", "-c", "1") for name in ("a", "b")}
    while not (failed_rows() and all_ran(chaos, keys)()):
        for name, worker in workers.items():
            if not worker.alive():
                result.kills += 1
                workers[name] = chaos.spawn(f"{name}-{result.kills + 1}", "-c", "1")
        if time.monotonic() - started > TIMEOUT:
            raise TimeoutError(f"poison case did not settle\n{chaos.log_tail()}")
        time.sleep(0.05)
    result.seconds = time.monotonic() - started
    result.notes["poison_runs"] = chaos.runs().get("poison", 0)
    wait_until(queue_is_empty, 30, "the queue to empty")
    return tally(result, chaos, keys)


# -- 6. garbage in the stream ---------------------------------------------------------

def garbage_entries() -> list[dict[str, bytes]]:
    """20 entries no worker can run: not JSON, JSON of the wrong shape, unknown tasks,
    huge ones, and entries without the message field."""
    huge = 2 * 1024 * 1024
    bodies: list[bytes] = [
        b"\xff\xfe\x00 binary", b"{not json", b"", b"nul", b"\"unterminated",
        b"[1, 2, 3]", b"\"a string\"", b"null", b'{"v": 1}', b'{"v": 99, "id": "x", "task": "t"}',
        b'{"v": 1, "id": "w1", "task": "t", "attempt": "many"}', b'{"v": 1, "id": "", "task": "t"}',
    ]
    bodies += [json.dumps({"v": 1, "id": f"unknown-{n}", "task": "no.such.task",
                           "payload": n}).encode() for n in range(4)]
    bodies += [b"{" * huge, json.dumps({"v": 1, "id": "huge-unknown", "task": "no.such.task",
                                        "payload": "x" * huge}).encode()]
    entries = [{"m": body} for body in bodies]
    entries += [{"other": b"field"}, {"other": b"y" * huge}]
    return entries


def garbage(chaos: Chaos, *, good: int = 1000) -> Result:
    """`good` tasks with 20 garbage entries spread among them; one worker, never restarted."""
    from django_taskrunner.store import get_store

    result, keys = Result("garbage", good), {str(n) for n in range(good)}
    entries = garbage_entries()
    client = redis.Redis.from_url(chaos.broker.url)
    stream = get_store().streams.stream("default")
    step = good // len(entries)
    for index, entry in enumerate(entries):
        dispatch_work(step, start=index * step)
        client.xadd(stream, entry)
    dispatch_work(good - step * len(entries), start=step * len(entries))
    client.close()
    started = time.monotonic()
    worker = chaos.spawn("only", "-c", "4")
    wait_until(lambda: all_ran(chaos, keys)() and failed_rows() >= len(entries), TIMEOUT,
               f"every task and {len(entries)} failed rows\n{chaos.log_tail()}")
    result.seconds = time.monotonic() - started
    result.notes["garbage"] = len(entries)
    result.notes["worker_alive"] = worker.alive()
    wait_until(queue_is_empty, 30, "the queue to empty")
    return tally(result, chaos, keys)
