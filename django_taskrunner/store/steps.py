"""The kept results of a task's durable steps (`ctx.step`, core/steps.py).

One hash per task id, in its record's slot: step name -> the JSON text core/steps.py
built. Read once per
attempt (HGETALL), written with one pipelined round trip per step (HSET + EXPIRE).
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.store import keys
from django_taskrunner.store.values import text


class StepsStore:
    """The steps hashes under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def load(self, task_id: str) -> dict[str, str]:
        """Every kept step of `task_id`: name -> JSON text (empty when none or expired)."""
        raw = self.client.hgetall(keys.steps_key(self.prefix, task_id))
        return {text(name): text(value) for name, value in raw.items()}

    def keep(self, task_id: str, name: str, value: str, ttl_seconds: int) -> None:
        """HSET one step and (re)set the hash's TTL, in one round trip."""
        key = keys.steps_key(self.prefix, task_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, name, value)
        pipe.expire(key, ttl_seconds)
        pipe.execute()

    def holders(self, task_ids: list[str], ttl_seconds: int) -> set[str]:
        """The ids among `task_ids` that have kept steps, whose TTL is set to
        `ttl_seconds` now (one round trip: EXPIRE answers 0 for a key that is gone)."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.expire(keys.steps_key(self.prefix, task_id), ttl_seconds)
        return {task_id for task_id, n in zip(task_ids, pipe.execute(), strict=True) if n}
