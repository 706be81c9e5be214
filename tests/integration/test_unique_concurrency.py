"""Many dispatchers racing for one unique key: 50 threads here and 4 other processes,
200 rounds, a fresh key each round. Exactly one dispatch wins each round, every other
one is refused naming the winner, and the stream holds exactly one message per round,
whose id is the value of that round's lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from django_taskrunner import TaskAlreadyDispatched, TaskMessage, dispatch
from django_taskrunner.store import get_store
from tests.conftest import ROOT, RedisTarget, worker_env
from tests.internals import holder_value

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 200
THREADS = 50
PROCESSES = 4
TASK = "tests.testapp.tasks.unique_race"


def start_racers(prefix: str, redis_target: RedisTarget) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "tests.integration.unique_racer", f"p{n}", str(ROUNDS)],
            cwd=ROOT, env=worker_env(prefix, redis_target),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        for n in range(PROCESSES)
    ]


class ThreadRacers:
    """THREADS threads that each dispatch once per round, all released by one barrier."""

    def __init__(self) -> None:
        self.start = threading.Barrier(THREADS + 1)
        self.done = threading.Barrier(THREADS + 1)
        self.round_no = 0
        self.outcomes: dict[int, list[str]] = defaultdict(list)
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self.race, daemon=True) for _ in range(THREADS)]
        for thread in self.threads:
            thread.start()

    def race(self) -> None:
        for _ in range(ROUNDS):
            self.start.wait(30)
            round_no = self.round_no
            try:
                outcome = "ok:" + dispatch(TASK, {"round": round_no}).id
            except TaskAlreadyDispatched as exc:
                outcome = "held:" + exc.holder_id
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                outcome = f"error:{exc!r}"
            self.outcomes[round_no].append(outcome)
            self.done.wait(30)


def pop_within(client: Any, key: str, seconds: float) -> Any:
    """BLPOP in one-second reads until `seconds` pass: a single long BLPOP can outlast the
    client's socket read timeout on a loaded machine (racer processes starting Django)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        popped = client.blpop([key], timeout=1)
        if popped:
            return popped
    return None


def test_exactly_one_of_54_concurrent_dispatches_wins_each_of_200_rounds(r, prefix,
                                                                         redis_target):
    base = f"{prefix}:test"
    racers = start_racers(prefix, redis_target)
    try:
        for _ in range(PROCESSES):
            assert pop_within(r, f"{base}:ready", 60), "a racer process did not start"
        threads = ThreadRacers()
        process_outcomes: dict[int, list[str]] = {}
        for round_no in range(ROUNDS):
            threads.round_no = round_no
            pipe = r.pipeline(transaction=False)
            for n in range(PROCESSES):
                pipe.rpush(f"{base}:go:p{n}", round_no)
            # Whoever is signalled first tends to win (50 Python threads take a few ms to
            # get through, the processes wake in a fraction of that): alternate the order
            # so both kinds of racer win rounds.
            if round_no % 2:
                pipe.execute()
                threads.start.wait(30)
            else:
                threads.start.wait(30)
                pipe.execute()
            threads.done.wait(30)
            process_outcomes[round_no] = [
                pop_within(r, f"{base}:results:{round_no}", 30)[1].decode()
                for _ in range(PROCESSES)
            ]
        for proc in racers:
            assert proc.wait(30) == 0, proc.stdout.read().decode() if proc.stdout else ""
    finally:
        for proc in racers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    assert threads.errors == []
    stream_messages = [TaskMessage.from_json(fields[b"m"])
                       for _id, fields in r.xrange(get_store().streams.stream("default"))]
    per_round = Counter(message.payload["round"] for message in stream_messages)
    assert len(stream_messages) == ROUNDS
    assert set(per_round.values()) == {1}
    stream_ids = {message.payload["round"]: message.id for message in stream_messages}
    holders = {message.payload["round"]: holder_value(message) for message in stream_messages}
    for round_no in range(ROUNDS):
        outcomes = threads.outcomes[round_no] + process_outcomes[round_no]
        assert len(outcomes) == THREADS + PROCESSES
        winners = [outcome[3:] for outcome in outcomes if outcome.startswith("ok:")]
        assert len(winners) == 1, (round_no, outcomes)
        assert Counter(outcomes)[f"held:{winners[0]}"] == THREADS + PROCESSES - 1
        # The message in the stream is the winner's, and so is the lock: no lock without
        # its message, no message without its lock
        assert stream_ids[round_no] == winners[0]
        lock_key = f"{prefix}:{{default}}:unique:{TASK}:round-{round_no}"
        assert r.get(lock_key).decode() == holders[round_no]
