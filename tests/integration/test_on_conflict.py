"""on_conflict: what a unique dispatch does when it meets a held lock.

"raise" refuses (as before), "return" gives back the holder's message, "replace" hands
a holder that has not started the new payload, keeping its id and lock; a started
holder makes "replace" act as "raise". Under 50 racing threads exactly one message
exists, and the replace that ran last is the payload that runs.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from django_taskrunner import TaskAlreadyDispatched, TaskMessage, dispatch, get_redis, task
from django_taskrunner import TaskMessage as Message
from django_taskrunner.store import get_store, keys
from tests.testapp.tasks import runs_key

pytestmark = pytest.mark.django_db(transaction=True)


@task(name="tests.on_conflict.keyed", unique=True, unique_for=60,
      unique_key=lambda payload: str(payload["k"]))
def keyed(payload: Any) -> None:
    get_redis().rpush(f"{runs_key()}:keyed", json.dumps(payload))


@task(name="tests.on_conflict.replacing", unique=True, unique_for=60, on_conflict="replace",
      unique_key=lambda payload: str(payload["k"]))
def replacing(payload: Any) -> None:
    get_redis().rpush(f"{runs_key()}:replacing", json.dumps(payload))


def runs(name: str) -> list[Any]:
    return [json.loads(item) for item in get_redis().lrange(f"{runs_key()}:{name}", 0, -1)]


def stream_messages(r: Any, queue: str = "default") -> list[Message]:
    entries = r.xrange(keys.stream_key(get_store().prefix, queue))
    return [Message.from_json(fields[b"m"], stream_id=entry_id.decode())
            for entry_id, fields in entries]


def delayed_messages(r: Any, queue: str = "default") -> list[tuple[Message, float]]:
    members = r.zrange(keys.delayed_key(get_store().prefix, queue), 0, -1, withscores=True)
    return [(Message.from_json(body), score) for body, score in members]


def test_raise_stays_the_default(r):
    first = keyed.dispatch({"k": 1, "v": "a"})

    with pytest.raises(TaskAlreadyDispatched) as caught:
        keyed.dispatch({"k": 1, "v": "b"})

    assert caught.value.holder_id == first.id
    assert [m.payload for m in stream_messages(r)] == [{"k": 1, "v": "a"}]


def test_return_gives_the_queued_holders_message(r):
    first = keyed.dispatch({"k": 2, "v": "a"})

    again = keyed.dispatch({"k": 2, "v": "b"}, on_conflict="return")

    assert isinstance(again, TaskMessage)
    assert again.id == first.id
    assert again.payload == {"k": 2, "v": "a"}
    assert again.lock_key == first.lock_key
    assert len(stream_messages(r)) == 1


def test_return_gives_a_delayed_holders_message(r):
    first = keyed.dispatch_delayed({"k": 3, "v": "a"}, delay=600)

    again = dispatch(keyed, {"k": 3, "v": "b"}, on_conflict="return")
    later = keyed.dispatch_delayed({"k": 3, "v": "c"}, delay=5, on_conflict="return")

    assert again.id == later.id == first.id
    assert again.payload == later.payload == {"k": 3, "v": "a"}
    assert len(delayed_messages(r)) == 1 and stream_messages(r) == []


def test_return_of_a_holder_that_finished_its_run_gives_its_id(r, run_burst):
    first = keyed.dispatch({"k": 4}, unique_mode="while_locked")
    run_burst("--queue", "default")

    again = keyed.dispatch({"k": 4}, on_conflict="return")

    assert again.id == first.id
    assert again.payload is None  # the body is gone with its stream entry


def test_replace_swaps_a_queued_holders_payload_keeping_id_and_lock(r, run_burst):
    first = replacing.dispatch({"k": 5, "v": "a"})
    lock_value = r.get(first.lock_key)

    second = replacing.dispatch({"k": 5, "v": "b"})

    assert second.id == first.id
    assert second.dispatch_token == first.dispatch_token
    assert r.get(first.lock_key) == lock_value
    [queued] = stream_messages(r)
    assert (queued.id, queued.payload) == (first.id, {"k": 5, "v": "b"})
    assert queued.stream_id == second.stream_id
    run_burst("--queue", "default")
    assert runs("replacing") == [{"k": 5, "v": "b"}]
    assert not r.exists(first.lock_key)


def test_replace_swaps_a_delayed_holders_payload_and_keeps_its_due_time(r):
    first = replacing.dispatch_delayed({"k": 6, "v": "a"}, delay=600)
    [(_, due)] = delayed_messages(r)

    second = replacing.dispatch({"k": 6, "v": "b"})
    third = replacing.dispatch_delayed({"k": 6, "v": "c"}, delay=30)

    assert second.id == third.id == first.id
    [(waiting, score)] = delayed_messages(r)
    assert (waiting.id, waiting.payload, score) == (first.id, {"k": 6, "v": "c"}, due)
    assert stream_messages(r) == []


def test_replace_of_a_started_holder_raises(r):
    first = replacing.dispatch({"k": 7, "v": "a"})
    broker = get_store().streams
    broker.ensure_group("default")
    assert len(broker.read("default", "someone", 10, None)) == 1  # a worker took it

    with pytest.raises(TaskAlreadyDispatched) as caught:
        replacing.dispatch({"k": 7, "v": "b"})

    assert caught.value.holder_id == first.id
    assert [m.payload for m in stream_messages(r)] == [{"k": 7, "v": "a"}]


def test_per_dispatch_replace_overrides_the_tasks_raise(r):
    first = keyed.dispatch({"k": 8, "v": "a"})

    second = keyed.dispatch({"k": 8, "v": "b"}, on_conflict="replace")

    assert second.id == first.id
    assert [m.payload for m in stream_messages(r)] == [{"k": 8, "v": "b"}]


def test_dispatch_many_replaces_and_returns(r):
    first = replacing.dispatch({"k": 9, "v": "a"})

    batch = replacing.dispatch_many([{"k": 9, "v": "b"}, {"k": 10, "v": "x"},
                                     {"k": 10, "v": "y"}])
    returned = replacing.dispatch_many([{"k": 9, "v": "c"}], on_conflict="return")

    assert [m.id for m in batch][0] == first.id
    assert batch[1].id == batch[2].id
    assert returned[0].id == first.id and returned[0].payload == {"k": 9, "v": "b"}
    assert sorted((m.payload["k"], m.payload["v"]) for m in stream_messages(r)) == [
        (9, "b"), (10, "y")]


def test_fifty_racing_replaces_leave_one_message_with_the_last_payload(r, run_burst):
    first = replacing.dispatch({"k": 11, "v": "start"})
    barrier = threading.Barrier(50)
    returned: list[str] = []
    errors: list[BaseException] = []

    def racer(n: int) -> None:
        barrier.wait()
        try:
            for round_ in range(4):
                returned.append(replacing.dispatch({"k": 11, "v": f"t{n}-{round_}"}).id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert set(returned) == {first.id} and len(returned) == 200
    [queued] = stream_messages(r)
    assert queued.id == first.id
    # The replace that ran last was some thread's last one: its payload is what is left
    assert queued.payload["v"].startswith("t") and queued.payload["v"].endswith("-3")
    replacing.dispatch({"k": 11, "v": "last"})
    [queued] = stream_messages(r)
    assert queued.payload == {"k": 11, "v": "last"}
    run_burst("--queue", "default")
    assert runs("replacing") == [{"k": 11, "v": "last"}]


def test_the_mode_record_names_the_holders_policy(r):
    first = replacing.dispatch({"k": 12})
    plain = keyed.dispatch({"k": 12})
    mode_key = keys.unique_mode_key(get_store().prefix, "default", first.lock_key)
    plain_key = keys.unique_mode_key(get_store().prefix, "default", plain.lock_key)

    assert r.get(mode_key).split(b"\n")[:2] == [b"until_finished", b"replace"]
    assert r.get(plain_key).split(b"\n")[:2] == [b"until_finished", b"raise"]


def test_replace_and_return_work_on_a_queue_split_into_shards(r, taskrunner_settings):
    taskrunner_settings(SHARDS={"hot": 4})
    first = replacing.dispatch({"k": 13, "v": "a"}, queue="hot")

    second = replacing.dispatch({"k": 13, "v": "b"}, queue="hot")
    held = replacing.dispatch({"k": 13, "v": "c"}, queue="hot", on_conflict="return")

    assert second.id == held.id == first.id
    assert held.payload == {"k": 13, "v": "b"}
    shard = first.lock_key.split("{", 1)[1].split("}", 1)[0]
    assert [m.payload for m in stream_messages(r, shard)] == [{"k": 13, "v": "b"}]


def test_replace_never_mixes_a_holder_with_another_mode_or_task_id(r):
    plain = replacing.dispatch({"k": 14, "v": "a"})
    with_id = replacing.dispatch({"k": 15, "v": "a"}, task_id="export-15")

    with pytest.raises(TaskAlreadyDispatched):  # the holder frees at another point
        replacing.dispatch({"k": 14, "v": "b"}, unique_mode="until_executing")
    with pytest.raises(TaskAlreadyDispatched):  # its body would lose the task_id flag
        replacing.dispatch({"k": 15, "v": "b"})
    same = replacing.dispatch({"k": 15, "v": "c"}, task_id="export-15b")

    assert same.id == with_id.id == "export-15"
    payloads = sorted((m.id == plain.id, m.payload["v"], m.has_task_id)
                      for m in stream_messages(r))
    assert payloads == [(False, "c", True), (True, "a", False)]
