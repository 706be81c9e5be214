"""unique_mode="debounce": every dispatch in the quiet period replaces the waiting
payload and moves its start to `debounce` seconds after the latest dispatch, so a burst
runs once, with the last payload; atomic under concurrent dispatches."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from django_taskrunner import TaskMessage, dispatch, get_redis, lookup, task
from django_taskrunner.store import get_store, keys
from tests.testapp.tasks import runs_key
from tests.worker_helpers import MovableClock, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


@task(name="tests.debounce.reindex", unique_mode="debounce", debounce=60,
      unique_key=lambda payload: str(payload["product"]))
def reindex(payload: Any) -> None:
    get_redis().rpush(f"{runs_key()}:reindex", json.dumps(payload))


@task(name="tests.debounce.quick", unique_mode="debounce", debounce=1,
      unique_key=lambda payload: str(payload["product"]))
def quick(payload: Any) -> None:
    get_redis().rpush(f"{runs_key()}:quick", json.dumps(payload))


def runs(name: str) -> list[Any]:
    return [json.loads(item) for item in get_redis().lrange(f"{runs_key()}:{name}", 0, -1)]


def waiting(r: Any) -> list[tuple[TaskMessage, int]]:
    members = r.zrange(keys.delayed_key(get_store().prefix, "default"), 0, -1, withscores=True)
    return [(TaskMessage.from_json(body), int(score)) for body, score in members]


def stream_length(r: Any) -> int:
    return r.xlen(keys.stream_key(get_store().prefix, "default"))


def test_a_burst_leaves_one_waiting_task_with_the_last_payload(r, run_burst, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    sent = [reindex.dispatch({"product": 42, "n": n}) for n in range(10)]

    assert len({message.id for message in sent}) == 1
    [(held, due)] = waiting(r)
    assert (held.id, held.payload) == (sent[0].id, {"product": 42, "n": 9})
    assert stream_length(r) == 0
    moved.advance(61)
    run_burst("--queue", "default")
    assert runs("reindex") == [{"product": 42, "n": 9}]
    assert lookup(sent[0].id).status == "succeeded"


def test_each_dispatch_moves_the_start_to_debounce_after_it(r, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    reindex.dispatch({"product": 1, "n": 0})
    [(_, first_due)] = waiting(r)
    moved.advance(20)

    reindex.dispatch({"product": 1, "n": 1})

    [(held, due)] = waiting(r)
    assert held.payload == {"product": 1, "n": 1}
    assert 19_000 <= due - first_due <= 21_000
    assert 59_000 <= r.pttl(held.lock_key) <= 60_000  # the lock lives as long as the wait


def test_other_keys_debounce_apart(r):
    a = reindex.dispatch({"product": "a"})
    b = reindex.dispatch({"product": "b"})

    assert a.id != b.id and len(waiting(r)) == 2


def test_once_the_period_is_over_a_dispatch_opens_a_new_one(r, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    first = reindex.dispatch({"product": 2, "n": 0})
    moved.advance(61)
    get_store().streams.promote_due("default", moved.now_ms(), 100)  # the leader moved it

    second = reindex.dispatch({"product": 2, "n": 1})

    assert second.id != first.id
    assert stream_length(r) == 1
    [(held, _)] = waiting(r)
    assert (held.id, held.payload) == (second.id, {"product": 2, "n": 1})


def test_dispatch_many_and_delayed_dispatches_debounce_too(r, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    batch = reindex.dispatch_many([{"product": 3, "n": n} for n in range(5)])
    later = reindex.dispatch_delayed({"product": 3, "n": 5}, delay=120)
    sooner = dispatch(reindex, {"product": 3, "n": 6})

    assert {message.id for message in [*batch, later, sooner]} == {batch[0].id}
    [(held, due)] = waiting(r)
    assert held.payload == {"product": 3, "n": 6}
    assert abs(due - (moved.now_ms() + 60_000)) < 2_000


def test_fifty_racing_dispatchers_leave_one_task_with_a_last_payload(r):
    barrier = threading.Barrier(50)
    ids: list[str] = []
    errors: list[BaseException] = []

    def racer(n: int) -> None:
        barrier.wait()
        try:
            for round_ in range(4):
                ids.append(reindex.dispatch({"product": 7, "v": f"t{n}-{round_}"}).id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == [] and len(ids) == 200 and len(set(ids)) == 1
    [(held, _)] = waiting(r)
    assert held.id == ids[0]
    assert held.payload["v"].endswith("-3")  # some thread's last dispatch ran last


def test_a_worker_runs_a_burst_once_after_the_quiet_period(r):
    with worker_thread():
        sent = [quick.dispatch({"product": 9, "n": n}) for n in range(5)]
        wait_for(lambda: runs("quick"))
        record = wait_for(lambda: (found := lookup(sent[0].id)) and found.status == "succeeded")

    assert record
    assert runs("quick") == [{"product": 9, "n": 4}]
    assert waiting(r) == [] and not r.exists(sent[0].lock_key)


@task(name="tests.debounce.expiring", unique_mode="debounce", debounce=60, expires=10,
      unique_key=lambda payload: "one")
def expiring(payload: Any) -> None:
    pass


def test_expiry_counts_from_the_end_of_the_quiet_period(r, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    message = expiring.dispatch({})
    [(held, due)] = waiting(r)

    assert held.expires_at_ms == message.expires_at_ms
    assert abs(held.expires_at_ms - (due + 10_000)) < 1_000
    assert due >= moved.now_ms() + 59_000
