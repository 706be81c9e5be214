"""What keeping limit waits costs the record write: Redis' time per record of
`record_write.lua` as it is, beside the same script without the limit-wait part (its
HMGET of two fields fewer, no wait to close), in one run, on one server.

    taskset -c 0 python bench/limit_wait_cost.py        # --rounds 6 --batches 100 --batch 100
    python bench/limit_wait_cost.py --smoke

It starts its own redis-server. Each round loads both scripts and runs, for each in turn,
`--batches` batches of `--batch` records: the start write ("running") then the final one
("succeeded") of tasks that never waited, the worker's two writes of every task. Redis'
time is read off `INFO commandstats` (reset before each script's turn). The figure to
read is the ratio: the limit waits' part on a task that never waited.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.delayed_timing import start_redis, wait_until  # noqa: E402
from django_taskrunner.store import scripts  # noqa: E402


def without_waits(source: str) -> str:
    """The script as it was before limit waits: the HMGET of five fields, no close."""
    close = ("  if now[6] then\n    close_wait(record, now[6], now[7], kv, status_at and "
             "kv[status_at])\n  end\n")
    if close not in source:
        raise SystemExit("record_write.lua changed: update this benchmark's without_waits()")
    return source.replace("'wt', 'lws', 'lw')", "'wt')").replace(close, "")


def batch_args(round_no: int, batch_no: int, size: int, status: str) -> tuple[list, list]:
    keys, args = [], []
    for n in range(size):
        task_id = f"t{round_no}-{batch_no}-{n}"
        keys += [f"bench:record:{{{task_id}}}", f"bench:record:{{{task_id}}}:done"]
        fields = (["s", "running", "t", "app.tasks.noop", "q", "default", "a", "1", "w",
                   "host-1-1234", "st", "1733200000000", "d", "1733199999000", "ttl", "3600"]
                  if status == "running" else
                  ["s", "succeeded", "t", "app.tasks.noop", "q", "default", "a", "1", "w",
                   "host-1-1234", "f", "1733200000100", "st", "1733200000000", "r", "null"])
        args += ["update" if status == "running" else "final", "3600", "0", "0", "0",
                 task_id, "0", len(fields), *fields]
    return keys, args


def turn(client, sha: str, round_no: int, batches: int, size: int) -> float:  # type: ignore[no-untyped-def]
    """Microseconds of Redis time per record (start + final write) for one script."""
    client.config_resetstat()
    for batch_no in range(batches):
        for status in ("running", "succeeded"):
            keys, argv = batch_args(round_no, batch_no, size, status)
            client.evalsha(sha, len(keys), *keys, *argv)
    stats = client.info("commandstats")["cmdstat_evalsha"]
    if client.hget(f"bench:record:{{t{round_no}-0-0}}", "s") != b"succeeded":
        raise SystemExit("the writes did not land: the figures would mean nothing")
    client.flushall()
    return stats["usec"] / (batches * size)


def _answers(client) -> bool:  # type: ignore[no-untyped-def]
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.batches, args.batch = 2, 3, 10
    import redis

    with tempfile.TemporaryDirectory() as workdir:
        proc, url = start_redis(workdir)
        try:
            client = redis.Redis.from_url(url)
            wait_until(lambda: _answers(client), 10)
            source = scripts.source("record_write")  # with its shared parts put in
            shas = {"with limit waits": client.script_load(source),
                    "without": client.script_load(without_waits(source))}
            figures: dict[str, list[float]] = {name: [] for name in shas}
            for round_no in range(args.rounds):
                order = list(shas.items()) if round_no % 2 == 0 else list(shas.items())[::-1]
                for name, sha in order:
                    figures[name].append(turn(client, sha, round_no, args.batches, args.batch))
        finally:
            proc.terminate()
            proc.wait(10)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in medians.items():
        print(f"{name:>17}: {value:6.2f} us of Redis time per task (start + final write)")
    print(f"ratio with/without: {medians['with limit waits'] / medians['without']:.3f}")


if __name__ == "__main__":
    main()
