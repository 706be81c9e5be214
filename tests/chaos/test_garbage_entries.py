"""Chaos: 30 malformed entries of every kind among 1,000 good tasks, a dead consumer
holding some of them, and a real `runtasks` worker SIGKILLed while it holds good
messages (issue 22, bugs 8, 9, 13).

Every good task runs (exactly once, but for those the killed worker held), every
malformed entry becomes exactly one failed row and runs nothing, nothing stays pending,
and reclaim never stops: before, one entry too deep to decode or with 1e400 in a number
made every reclaim pass of the queue raise, so no dead worker's task was recovered.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.chaos import scenarios
from tests.chaos.harness import Chaos, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

GOOD = 1000
SLEEP = 0.03  # per good task: the victim is surely busy, and holds messages, when killed
SETTINGS = {"RESERVATION_TIMEOUT": 2}
TASK = "tests.testapp.chaos_tasks.chaos_work"
GHOST_GOOD, GHOST_BAD = 50, 10  # what the dead consumer holds from the start


@pytest.fixture
def site(tmp_path: Any, redis_url: str) -> Iterator[Callable[..., Chaos]]:
    """A chaos site: a private Redis for the queues, run counts in the test Redis."""
    from django.db import connection

    with contextlib.ExitStack() as stack:

        def open_site(**overrides: Any) -> Chaos:
            return stack.enter_context(scenarios.chaos_site(
                tmp_path, redis_url, str(connection.settings_dict["NAME"]), **overrides))

        yield open_site


def message(n: int, **fields: Any) -> dict[str, Any]:
    data = {"v": 1, "id": f"bad-{n}", "task": TASK, "queue": "default",
            "payload": {"n": f"bad-{n}"}, "attempt": 1, "ts": 1_700_000_000_000}
    data.update(fields)
    return data


def raw(n: int, **fields: bytes) -> bytes:
    """A message with the given fields as raw JSON text (what json.dumps cannot write)."""
    text = json.dumps(message(n, **{key: f"@{key}@" for key in fields})).encode()
    for key, value in fields.items():
        text = text.replace(f'"@{key}@"'.encode(), value)
    return text


def malformed_entries(prefix: str) -> list[dict[str, bytes]]:
    """30 stream entries no worker may run, of every kind issue 22 lists."""
    from django_taskrunner.store import keys

    def js(n: int, **fields: Any) -> bytes:
        return json.dumps(message(n, **fields)).encode()

    stream = keys.stream_key(prefix, "default")
    bodies = [
        # nesting: too deep for Python's parser (bug 8), and past the payload limit
        raw(1, payload=b"[" * 988 + b"]" * 988),
        raw(2, payload=b"[" * 5000 + b"]" * 5000),
        raw(3, payload=b"[" * 150 + b"]" * 150),
        # overflowing numbers (bug 8)
        raw(4, attempt=b"1e400"), raw(5, ts=b"1e400"), raw(6, exp=b"1e400"),
        raw(7, rt=b"1e400"), raw(8, payload=b'{"n": 1e400}'), raw(9, payload=b"NaN"),
        js(10, attempt=10**30),
        # fields of the wrong type, locks outside the queue's lock space (bug 9)
        js(11, lock=5, mode="until_finished"), js(12, lock=["k"], mode="until_finished"),
        js(13, lock=stream, mode="until_finished"),
        js(14, lock=keys.unique_key(prefix, "other", TASK, "k"), mode="until_executing"),
        js(15, lock=keys.unique_key(prefix, "default", TASK, "k"), mode="forever"),
        js(16, tid="yes"), js(17, attempt="many"), js(18, queue=5), js(19, id=["x"]),
        js(20, ts="yesterday"),
        # lone surrogates (bug 13): escaped in a value, in a key, and as raw bytes
        raw(21, payload=b'"\\udcff"'), raw(22, payload=b'{"\\ud800": 1}'),
        raw(23, payload=b'"\xed\xb3\xbf"'),
        # huge: over the size limit, and 2 MiB of "{" (under it, too deep to parse)
        js(24, payload="x" * (5 * 1024 * 1024)), b"{" * (2 * 1024 * 1024),
        # not JSON, not an object, a wire version this release does not read
        b"\xff\xfe binary", b"{not json", b"[1, 2, 3]", js(29, v=3),
    ]
    return [{"m": body} for body in bodies] + [{"other": b"field"}]  # 30: no message field


def held_by(chaos: Chaos, consumer: str) -> set[str]:
    """Keys of the good tasks whose messages `consumer` holds (garbage is skipped)."""
    from django_taskrunner.store import get_store

    broker = get_store().streams
    client = redis.Redis.from_url(chaos.broker.url)
    try:
        rows = client.xpending_range(broker.stream("default"), broker.group, "-", "+", 10_000,
                                     consumername=consumer)
        found = set()
        for row in rows:
            entries = client.xrange(broker.stream("default"), row["message_id"],
                                    row["message_id"])
            body = entries[0][1].get(b"m", b"") if entries else b""
            if body.startswith((b'{"v":1,"id":', b'{"v":2,"task":')) and len(body) < 1000:
                # one of dispatch's (with its id, or a plain one's, without)
                found.add(str(json.loads(body)["payload"]["n"]))
        return found
    finally:
        client.close()


def pending_ids(chaos: Chaos) -> set[str]:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    rows = broker.client.xpending_range(broker.stream("default"), broker.group, "-", "+", 10_000)
    return {row["message_id"].decode() for row in rows}


def queue_entries(chaos: Chaos) -> list[str]:
    """Dispatch good tasks with the malformed entries among them; returns the latter's ids.

    The first 60 entries (50 good, 10 malformed) are read by a consumer that never acks,
    a worker dead from the start: reclaim must take its good messages past the bad ones.
    """
    from django_taskrunner.store import get_store

    broker = get_store().streams
    stream = broker.stream("default")
    bad = malformed_entries(chaos.prefix)
    bad_ids, n = [], 0
    for index, entry in enumerate(bad):
        chunk = GHOST_GOOD // GHOST_BAD if index < GHOST_BAD else (
            (GOOD - GHOST_GOOD) // (len(bad) - GHOST_BAD))
        scenarios.dispatch_work(chunk, SLEEP, start=n)
        n += chunk
        bad_ids.append(broker.client.xadd(stream, entry).decode())
    scenarios.dispatch_work(GOOD - n, SLEEP, start=n)
    broker.ensure_group("default")
    broker.client.xreadgroup(broker.group, "ghost", {stream: ">"}, count=GHOST_GOOD + GHOST_BAD)
    return bad_ids


def test_malformed_entries_among_good_tasks_with_a_worker_killed_lose_and_stall_nothing(
    site: Any,
) -> None:
    from django_taskrunner.models import FailedTask

    chaos = site(**SETTINGS)
    bad_ids = queue_entries(chaos)
    assert len(bad_ids) == 30
    ghost_held = pending_ids(chaos)
    assert len(ghost_held) == GHOST_GOOD + GHOST_BAD and len(ghost_held & set(bad_ids)) == 10
    started = time.monotonic()
    keys = {str(n) for n in range(GOOD)}

    # A worker takes over what the dead consumer held, bad entries included...
    victim = chaos.spawn("victim", "-c", "4")
    wait_until(lambda: not ghost_held & pending_ids(chaos), 30,
               f"the dead consumer's entries to be reclaimed and done\n{chaos.log_tail()}")
    # ...and is SIGKILLed while it holds good messages; another worker starts
    wait_until(lambda: chaos.runs_by(victim.pid) >= 100, 30, f"the victim to be busy\n"
               f"{chaos.log_tail()}", step=0.01)
    victim.kill(signal.SIGKILL)
    victim.proc.wait(10)
    orphaned = held_by(chaos, "victim")
    assert orphaned, "the victim held no good message when killed: raise SLEEP"
    assert chaos.ran_count() < GOOD * 0.9, "the run ended before the kill: raise SLEEP"
    chaos.spawn("survivor", "-c", "4")

    wait_until(lambda: chaos.all_ran(keys) and FailedTask.objects.count() >= len(bad_ids)
               and not pending_ids(chaos), 60,
               f"every task, {len(bad_ids)} failed rows, nothing pending\n{chaos.log_tail()}")
    seconds = time.monotonic() - started
    codes = chaos.stop_all()

    runs = chaos.runs()
    rows = list(FailedTask.objects.all())
    logs = "\n".join(worker.log.read_text(errors="replace") for worker in chaos.workers)
    print(f"garbage-kill good={GOOD} bad={len(bad_ids)} orphaned={len(orphaned)} "
          f"duplicates={sum(runs[k] - 1 for k in keys)} wall_s={seconds:.1f}")
    # every good task ran; only those the killed worker held may have run twice
    assert all(runs.get(key, 0) >= 1 for key in keys)
    assert {key for key in keys - orphaned if runs[key] != 1} == set()
    # each malformed entry is exactly one failed row under its own entry id, never run
    assert sorted(row.message_id for row in rows) == sorted(f"{sid}@default" for sid in bad_ids)
    assert {row.error_class for row in rows} == {"django_taskrunner.exceptions.InvalidTaskPayload"}
    assert not [key for key in runs if key.startswith("bad-")]
    # nothing pending or left in the stream; reclaim and the executor never failed
    assert pending_ids(chaos) == set()
    from django_taskrunner.store import get_store

    assert get_store().streams.length("default") == 0
    assert "error while reclaiming" not in logs
    assert "stays pending" not in logs
    assert set(codes.values()) == {0}, codes
