"""The bare loop doing the Redis work a django-taskrunner worker must do per task, and
nothing else: the floor under the runner's CPU per task (bench/floor.py).

    python -m benchlib.floor_worker LEVEL      # LEVEL: read, delete or records

Reads the stream django-taskrunner's `dispatch_many` filled (queue `default` of the
benchmark site) under a consumer group of its own, XREADGROUP COUNT 100 (blocking), and
for each entry decodes the body with `json.loads` and runs the job on its payload. Then,
once per batch, in one pipelined round trip:
- `read`: XACK of the batch (the peers benchmark's bare loop, on the runner's messages);
- `delete`: XACK and XDEL (the runner deletes what it acked: `DELETE_ON_ACK`);
- `records`: and before them the batch's final task records, the acker's
  `record_write.lua` call with the fields a success writes (status, task, queue,
  attempt, worker, start, finish, result), listing each in the queue's finished index.

No pool, no validation beyond `json.loads`, no statistics, no cancel checks, no time
limits: what is left of the runner's cost above this floor is everything else it does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import redis
from benchlib.job import job

from django_taskrunner.store import keys

PREFIX = "bench"  # the benchmark site's PREFIX
QUEUE = "default"
GROUP = "floor"
CONSUMER = "floor-1"
LEVELS = ("read", "delete", "records")
# The acker's figures: records per script call, ids the finished index keeps.
WRITE_BATCH = 200
FINISHED_KEEP = 10_000
RESULT_TTL_S = 86_400
SCRIPT = (Path(keys.__file__).parent / "lua" / "record_write.lua").read_text()


def ensure_group(client: redis.Redis, stream: str) -> None:
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def record_call(sha: str, done: list[tuple[str, int]], finished_ms: int) -> list[object]:
    """EVALSHA arguments of `record_write.lua` for the succeeded tasks `done` (id, start ms)."""
    script_keys: list[str] = []
    specs = []
    index = keys.finished_key(PREFIX, QUEUE)
    cutoff = str(finished_ms - RESULT_TTL_S * 1000)
    finished = str(finished_ms)
    for task_id, started_ms in done:
        script_keys += [keys.record_key(PREFIX, task_id), keys.record_done_key(PREFIX, task_id),
                        index]
        specs.append(["final", str(RESULT_TTL_S), "1", str(FINISHED_KEEP), cutoff, task_id,
                      ["s", "succeeded", "t", "job", "q", QUEUE, "a", "1", "w", CONSUMER,
                       "st", str(started_ms), "f", finished, "r", "null"]])
    return ["EVALSHA", sha, len(script_keys), *script_keys,
            json.dumps(specs, separators=(",", ":"))]


def main(level: str) -> None:
    if level not in LEVELS:
        raise SystemExit(f"level must be one of {', '.join(LEVELS)}")
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    stream = keys.stream_key(PREFIX, QUEUE)
    ensure_group(client, stream)
    sha = client.script_load(SCRIPT)
    while True:
        reply = client.xreadgroup(GROUP, CONSUMER, {stream: ">"}, count=100, block=1000)
        if not reply:
            continue
        ids = []
        done = []
        for stream_id, fields in reply[0][1]:
            data = json.loads(fields[keys.ENTRY_FIELD])
            started_ms = time.time_ns() // 1_000_000
            job(data["payload"])
            ids.append(stream_id)
            done.append((data["id"], started_ms))
        pipe = client.pipeline(transaction=False)
        if level == "records":
            finished_ms = time.time_ns() // 1_000_000
            for start in range(0, len(done), WRITE_BATCH):
                pipe.execute_command(*record_call(sha, done[start:start + WRITE_BATCH],
                                                  finished_ms))
        pipe.xack(stream, GROUP, *ids)
        if level != "read":
            pipe.xdel(stream, *ids)
        pipe.execute()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "read")
