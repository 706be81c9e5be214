"""The floor of any Streams runner: fetch a batch, run each job, ack the batch.

No retries, no recovery, no pool: XREADGROUP COUNT 100 (blocking), JSON-decode each
body, run the job, one XACK for the batch. Run as `python -m benchlib.bare_worker`.
"""

from __future__ import annotations

import json
import os

import redis
from benchlib.job import job

STREAM = "bare:stream"
GROUP = "bare"


def ensure_group(client: redis.Redis) -> None:
    try:
        client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def main() -> None:
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    ensure_group(client)
    while True:
        reply = client.xreadgroup(GROUP, "bare-1", {STREAM: ">"}, count=100, block=1000)
        if not reply:
            continue
        ids = []
        for stream_id, fields in reply[0][1]:
            job(json.loads(fields[b"m"])["payload"])
            ids.append(stream_id)
        client.xack(STREAM, GROUP, *ids)


if __name__ == "__main__":
    main()
