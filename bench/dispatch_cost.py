"""What one plain `dispatch()` costs the process that calls it, and where that goes.

    taskset -c 0,1 python bench/dispatch_cost.py           # --calls 10000 --rounds 3
    python bench/dispatch_cost.py --smoke                   # a few calls: figures only

Starts a private redis-server on the same CPU as this process (as peers.py places Redis
and the producers). Two parts, with task records on (the default) and off:

- *against the server*: per call, wall time and this process's CPU (user + system) of
  `dispatch()`, of the very `EVALSHA` (or `XADD`) it sends, sent bare on the same
  thread's connection (what redis-py and the round trip cost) and through redis-py's
  pool (what `dispatch()` saves by not taking a pooled connection), of a script doing
  nothing but the `XADD` (the least a dispatch whose record keeps its stream id can
  cost: a pipeline cannot hand the `XADD`'s reply to the record's write) and of a raw
  `XADD`; with the server's own time per call of each (`INFO commandstats`);
- *Python only*: the same steps timed with the commands answered at once, best of 5:
  the whole `dispatch()`, and its parts (the message, its JSON without and with its id,
  `Broker.add`); with records on, what a message that carries its id (an expiry, a
  trace) adds: the record's first write and its script arguments, `scripts.run`.
- *batches*: per message, wall time and this process's CPU of `dispatch_many` in
  batches of 100, and of raw `XADD`s pipelined by 100, with the server's own time per
  message of each (all its commands, `INFO commandstats`): what peers.py's
  `dispatch_many` ratio is made of.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import procs  # noqa: E402


def per_call(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    """Wall and CPU µs per call of `fn`, over `calls` calls."""
    cpu, wall = time.process_time(), time.perf_counter()  # CPU: user + system
    for _ in range(calls):
        fn()
    return (1e6 * (time.perf_counter() - wall) / calls,
            1e6 * (time.process_time() - cpu) / calls)


def sent_by(client: Any, send: Callable[[], Any]) -> tuple[Any, ...]:
    """The arguments of the one command `send()` makes `client` send."""
    seen: list[tuple[Any, ...]] = []
    real = client.execute_command

    def spy(*args: Any, **options: Any) -> Any:
        seen.append(args)
        return real(*args, **options)

    client.execute_command = spy
    try:
        send()
    finally:
        del client.execute_command
    return seen[-1]


XADD_ALONE = "return redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])"


def against_server(job: Any, client: Any, calls: int, rounds: int) -> None:
    from django_taskrunner.store import get_store

    own = get_store().streams.own_connections  # what dispatch() sends its command on
    alone_sha = client.script_load(XADD_ALONE)
    command = sent_by(own, lambda: job.dispatch({}))
    for round_no in range(1, rounds + 1):
        client.flushall()
        client.config_resetstat()
        dispatch = per_call(lambda: job.dispatch({}), calls)
        queued = sum(int(client.xlen(key)) for key in client.scan_iter("bench:*:stream"))
        if queued != calls:
            raise SystemExit(f"{calls} dispatches queued {queued} messages")
        stats = client.info("commandstats")
        server_us = stats.get(f"cmdstat_{str(command[0]).lower()}", {}).get("usec_per_call")
        bare = per_call(lambda: own.execute_command(*command), calls)
        pooled = per_call(lambda: client.execute_command(*command), calls)
        xadd = per_call(lambda: client.execute_command(
            "XADD", "bench:raw", "*", "m", "x" * 200), calls)
        # The least any script costs: one doing the XADD alone (a dispatch whose record
        # keeps the stream id needs a script: a pipeline cannot pass on the XADD's reply).
        client.config_resetstat()
        alone = per_call(lambda: client.evalsha(alone_sha, 1, "bench:raw", "m",
                                                "x" * 200), calls)
        alone_us = client.info("commandstats").get("cmdstat_evalsha", {}).get("usec_per_call")
        client.config_resetstat()
        per_call(lambda: client.execute_command("XADD", "bench:raw", "*", "m", "x" * 200),
                 calls)
        xadd_us = client.info("commandstats").get("cmdstat_xadd", {}).get("usec_per_call")
        print(f"  round {round_no}: dispatch {dispatch[0]:6.1f} µs wall {dispatch[1]:6.1f} µs "
              f"CPU | its {command[0]} sent bare {bare[0]:6.1f} / {bare[1]:6.1f}, through "
              f"redis-py's pool {pooled[0]:6.1f} / {pooled[1]:6.1f} | a script doing the XADD "
              f"alone {alone[0]:6.1f} / {alone[1]:6.1f} | raw XADD (pool) {xadd[0]:6.1f} / "
              f"{xadd[1]:6.1f} | server µs per call: {command[0]} {server_us}, the one-XADD "
              f"script {alone_us}, XADD {xadd_us}", flush=True)


BATCH = 100


def server_us(client: Any) -> float:
    """The server's time in all commands since the last CONFIG RESETSTAT, in µs."""
    return sum(float(stats["usec"]) for stats in client.info("commandstats").values())


def batches(job: Any, client: Any, calls: int, rounds: int) -> None:
    """`dispatch_many` in batches of `BATCH` against raw XADDs pipelined as many."""
    payloads = [{"n": n} for n in range(BATCH)]
    body = "x" * 200
    count = max(1, calls // BATCH)

    def raw_batch() -> None:
        pipe = client.pipeline(transaction=False)
        for _ in range(BATCH):
            pipe.execute_command("XADD", "bench:raw", "*", "m", body)
        pipe.execute()

    for round_no in range(1, rounds + 1):
        client.flushall()
        client.config_resetstat()
        many = per_call(lambda: job.dispatch_many(payloads), count)
        many_server = server_us(client) / (count * BATCH)
        queued = sum(int(client.xlen(key)) for key in client.scan_iter("bench:*:stream"))
        if queued != count * BATCH:
            raise SystemExit(f"{count * BATCH} messages dispatched, {queued} queued")
        client.config_resetstat()
        raw = per_call(raw_batch, count)
        raw_server = server_us(client) / (count * BATCH)
        print(f"  round {round_no}: dispatch_many of {BATCH} {many[0] / BATCH:6.2f} µs wall "
              f"{many[1] / BATCH:6.2f} µs CPU per message, server {many_server:6.2f} | raw "
              f"XADD pipelined by {BATCH} {raw[0] / BATCH:6.2f} / {raw[1] / BATCH:6.2f}, server "
              f"{raw_server:6.2f}", flush=True)


def best_us(fn: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def python_only(job: Any, client: Any, number: int) -> None:
    from django_taskrunner.core import records
    from django_taskrunner.core.dispatch import prepare
    from django_taskrunner.store import get_store, scripts

    broker = get_store().streams
    message, _claim = prepare(job, {})
    body = message.to_json()
    record = records.dispatch_record(message, job, message.queue)
    # The look at a queue's fair mark (EXISTS) answers 0, the rest a stream id: answered
    # with a stream id, the look found every queue fair and dispatch() took that path.
    answer = lambda *args, **options: 0 if args[0] == "EXISTS" else [b"1-0"]  # noqa: E731
    client.execute_command = answer
    broker.own_connections.execute_command = answer  # dispatch()'s own command
    try:
        parts: list[tuple[str, Callable[[], Any]]] = [
            ("dispatch()", lambda: job.dispatch({})),
            ("prepare (the message, checked)", lambda: prepare(job, {})),
        ]
        if record is not None:  # a plain dispatch's message goes without its id
            parts += [("TaskMessage.to_json_without_id", message.to_json_without_id)]
        parts += [("TaskMessage.to_json", message.to_json),
                  ("Broker.add, no record (the XADD)",
                   lambda: broker.add(message.queue, body, None))]
        if record is not None:  # what a message that carries its id adds
            stream = broker.stream(message.queue)
            add_args = broker.records._add_one_args(stream, body, record)
            parts += [
                ("with its id: dispatch_record",
                 lambda: records.dispatch_record(message, job, message.queue)),
                ("with its id: record_add_one args",
                 lambda: broker.records._add_one_args(stream, body, record)),
                ("with its id: scripts.run",
                 lambda: scripts.run(client, "record_add_one", *add_args)),
                ("with its id: Broker.add", lambda: broker.add(message.queue, body, record)),
            ]
        for label, fn in parts:
            print(f"  {label:34s} {best_us(fn, number):6.2f} µs", flush=True)
    finally:
        del client.execute_command
        del broker.own_connections.execute_command


def measure(args: argparse.Namespace, records_on: bool) -> None:
    import django

    django.setup()
    from django.conf import settings
    from djsite.benchapp.tasks import job

    from django_taskrunner.conf import reset
    from django_taskrunner.store.connection import get_redis

    settings.TASKRUNNER["RESULT_TTL"] = 86400 if records_on else 0
    reset()  # read the settings again: records on or off from here
    client = get_redis()
    print(f"records {'on' if records_on else 'off'}, against the server "
          f"({args.calls:,} calls a round):")
    against_server(job, client, args.calls, args.rounds)
    print(f"records {'on' if records_on else 'off'}, Python only (the client answering at "
          "once; best of 5):")
    python_only(job, client, args.number)
    print(f"records {'on' if records_on else 'off'}, batches ({args.calls:,} messages a "
          "round):")
    batches(job, client, args.calls, args.rounds)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--number", type=int, default=20_000,
                        help="calls per timing of the Python-only part")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.calls, args.rounds, args.number = 200, 1, 200
    procs.pin_self(procs.LOAD_CPU)
    with procs.private_redis("bench-dispatch-") as (workdir, url, _):
        os.environ.update(BENCH_REDIS_URL=url, DJANGO_SETTINGS_MODULE="djsite.settings",
                          BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        for records_on in (True, False):
            measure(args, records_on)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
