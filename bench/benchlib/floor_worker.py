"""The bare loop doing the Redis work a django-taskrunner worker must do per task, and
nothing else: the floor under the runner's CPU per task (bench/floor.py).

    python -m benchlib.floor_worker LEVEL      # LEVEL: read, delete, records, pool, pool-decode

Reads the stream django-taskrunner's `dispatch_many` filled (queue `default` of the
benchmark site) under a consumer group of its own, XREADGROUP COUNT 100 (blocking), and
for each entry decodes the body with `json.loads` and runs the job on its payload. Then,
once per batch, in one pipelined round trip:
- `read`: XACK of the batch (the peers benchmark's bare loop, on the runner's messages);
- `delete`: XACK and XDEL (the runner deletes what it acked: `DELETE_ON_ACK`);
- `records`: and before them the batch's final task records, the acker's
  `record_write.lua` call with the fields a success writes (status, task, queue,
  attempt, worker, start, finish, result), listing each in the queue's finished index.

`pool` does what `records` does with the runner's threads: the reading thread hands
each entry to 8 pool threads (a `SimpleQueue`), each decodes it, runs the job and hands
its ack and record to an acker thread, which sends what finished meanwhile in one round
trip once 10 ms passed or 100 wait; the reader reads again once a read's worth of room
is free (at most 8 running plus 100 waiting; a task's room frees when it finishes, its
ack following with the acker's next round trip).

`pool-decode` is `pool` with each body decoded by the runner's own decoder
(`TaskMessage.from_json`, every check it makes) instead of `json.loads`: a piece of the
runner's own Python put into the floor, to see what it costs in a drain beside what it
costs back to back (`bench/thread_cpu.py --floor pool-decode`).

Its client packs commands as the runner's does (`pack_with_hiredis`), and each thread
sends on a connection of its own as the runner's threads do (`thread_connections`, no
redis-py pool or pipeline in the way). No validation
beyond `json.loads`, no statistics, no cancel checks, no time limits, and
no threads but at `pool`: what is left of the runner's cost above this floor is
everything else it does.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

import redis
from benchlib.job import job

from django_taskrunner.core.message import TaskMessage
from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import pack_with_hiredis, thread_connections

PREFIX = "bench"  # the benchmark site's PREFIX
QUEUE = "default"
GROUP = "floor"
CONSUMER = "floor-1"
LEVELS = ("read", "delete", "records", "pool", "pool-decode")
THREADS = 8
READ = 100  # entries per read
ACK_LINGER_S, ACK_BATCH = 0.010, 100  # the acker's
# The acker's figures: records per script call, ids the finished index keeps.
WRITE_BATCH = 200
FINISHED_KEEP = 10_000
RESULT_TTL_S = 86_400
SCRIPT = scripts.source("record_write")


def ensure_group(client: redis.Redis, stream: str) -> None:
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def record_call(sha: str, done: list[tuple[str, int]], finished_ms: int) -> list[object]:
    """EVALSHA arguments of `record_write.lua` for the succeeded tasks `done` (id, start ms)."""
    script_keys: list[str] = []
    args: list[object] = []
    index = keys.finished_key(PREFIX, QUEUE)
    cutoff = str(finished_ms - RESULT_TTL_S * 1000)
    finished = str(finished_ms)
    for task_id, started_ms in done:
        script_keys += [keys.record_key(PREFIX, task_id), keys.record_done_key(PREFIX, task_id),
                        index]
        fields = ["s", "succeeded", "t", "job", "q", QUEUE, "a", "1", "w", CONSUMER,
                  "st", str(started_ms), "f", finished, "r", "null"]
        args += ["final", RESULT_TTL_S, "1", FINISHED_KEEP, cutoff, task_id, "0", len(fields),
                 *fields]
    return ["EVALSHA", sha, len(script_keys), *script_keys, *args]


def send(client: redis.Redis, sha: str, stream: str, level: str, ids: list[bytes],
         done: list[tuple[str, int]]) -> None:
    """One round trip: the records (at `records` and `pool`), XACK, XDEL (but at `read`)."""
    commands: list[tuple[object, ...]] = []
    if level in ("records", "pool", "pool-decode"):
        finished_ms = time.time_ns() // 1_000_000
        commands += [tuple(record_call(sha, done[start:start + WRITE_BATCH], finished_ms))
                     for start in range(0, len(done), WRITE_BATCH)]
    commands.append(("XACK", stream, GROUP, *ids))
    if level != "read":
        commands.append(("XDEL", stream, *ids))
    for reply in thread_connections(client).execute_many(commands):
        if isinstance(reply, Exception):
            raise reply


def read(client: redis.Redis, stream: str) -> list[tuple[bytes, bytes]]:
    """XREADGROUP COUNT `READ` BLOCK 1 s: (stream id, body) of each entry read."""
    reply = thread_connections(client).execute_command(
        "XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", READ, "BLOCK", 1000, "STREAMS",
        stream, ">")
    if not reply:
        return []
    entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]  # RESP3
    return [(stream_id, fields[fields.index(keys.ENTRY_FIELD) + 1])
            for stream_id, fields in entries]


def run_one(body: bytes) -> tuple[str, int]:
    """Decode an entry's body and run the job: (task id, start ms)."""
    data = json.loads(body)
    started_ms = time.time_ns() // 1_000_000
    job(data["payload"])
    return data["id"], started_ms


def run_decoded(body: bytes) -> tuple[str, int]:
    """`run_one`, the body decoded by the runner's decoder (`pool-decode`)."""
    message = TaskMessage.from_json(body)
    started_ms = time.time_ns() // 1_000_000
    job(message.payload)
    return message.id, started_ms


def main(level: str) -> None:
    if level not in LEVELS:
        raise SystemExit(f"level must be one of {', '.join(LEVELS)}")
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    pack_with_hiredis(client)
    stream = keys.stream_key(PREFIX, QUEUE)
    ensure_group(client, stream)
    sha = client.script_load(SCRIPT)
    if level.startswith("pool"):
        Pool(client, sha, stream, run_decoded if level == "pool-decode" else run_one).run()
    while True:
        entries = read(client, stream)
        if entries:
            done = [run_one(body) for _stream_id, body in entries]
            send(client, sha, stream, level, [stream_id for stream_id, _ in entries], done)


class Pool:
    """The `pool` level: a reader, 8 pool threads and an acker, as the runner has."""

    def __init__(self, client: redis.Redis, sha: str, stream: str,
                 run: Callable[[bytes], tuple[str, int]] = run_one) -> None:
        self.client, self.sha, self.stream, self.run_task = client, sha, stream, run
        self.inbox: queue.SimpleQueue[tuple[bytes, bytes]] = queue.SimpleQueue()
        self.room = threading.Condition()  # the reader waits for a read's worth of room
        self.held = 0  # read and not yet finished
        self.acks = threading.Condition()  # the acker waits for finished tasks
        self.ids: list[bytes] = []
        self.done: list[tuple[str, int]] = []

    def run(self) -> None:
        for _ in range(THREADS):
            threading.Thread(target=self.work, daemon=True).start()
        threading.Thread(target=self.ack, daemon=True).start()
        while True:
            with self.room:  # room for a whole read: at most THREADS held
                while self.held > THREADS:
                    self.room.wait()
            entries = read(self.client, self.stream)
            if entries:
                with self.room:
                    self.held += len(entries)
                for entry in entries:
                    self.inbox.put(entry)

    def work(self) -> None:
        while True:
            stream_id, body = self.inbox.get()
            finished = self.run_task(body)
            with self.acks:
                self.ids.append(stream_id)
                self.done.append(finished)
                if len(self.ids) in (1, ACK_BATCH):
                    self.acks.notify()
            with self.room:
                self.held -= 1
                if self.held == THREADS:
                    self.room.notify()

    def ack(self) -> None:
        while True:
            with self.acks:
                while not self.ids:
                    self.acks.wait()
                if len(self.ids) < ACK_BATCH:
                    self.acks.wait(ACK_LINGER_S)
                ids, done, self.ids, self.done = self.ids, self.done, [], []
            send(self.client, self.sha, self.stream, "pool", ids, done)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "read")
