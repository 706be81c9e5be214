"""One racing process of test_unique_concurrency: for each round it waits for the start
signal in Redis, dispatches that round's unique task and reports what happened.

Run as `python -m tests.integration.unique_racer NAME ROUNDS` with the test's env.
"""

from __future__ import annotations

import os
import sys


def main(name: str, rounds: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django_taskrunner import TaskAlreadyDispatched, dispatch, get_redis
    from django_taskrunner.conf import get_settings

    base = f"{get_settings().PREFIX}:test"
    redis = get_redis()
    redis.rpush(f"{base}:ready", name)
    for _ in range(rounds):
        popped = None
        while popped is None:
            popped = redis.blpop([f"{base}:go:{name}"], timeout=2)
        round_no = int(popped[1])
        try:
            outcome = "ok:" + dispatch("tests.testapp.tasks.unique_race", {"round": round_no}).id
        except TaskAlreadyDispatched as exc:
            outcome = "held:" + exc.holder_id
        redis.rpush(f"{base}:results:{round_no}", outcome)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
