"""`TaskContext`: what a `takes_context=True` task receives besides its payload, and its
durable steps (`ctx.step(name, fn, ...)`, below).
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import DuplicateStep, InvalidTaskPayload
from django_taskrunner.store import Store, get_store


@dataclass
class TaskContext:
    """The running attempt: its ids, a heartbeat, and a flag set when it should stop."""

    id: str
    task_name: str
    queue: str
    attempt: int
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _cancel: threading.Event = field(repr=False, default_factory=threading.Event)
    _progress: Callable[[Any], None] = field(repr=False, default=lambda value: None)
    # A workflow member's reader of what the step before it returned (core/workflows.py).
    _parent: Callable[[], Any] = field(repr=False, default=lambda: None)
    # --- durable steps (core/py): None outside a worker's or eager attempt ---
    _steps: Steps | None = field(repr=False, default=None)

    def heartbeat(self) -> bool:
        """Tell the queue this attempt is alive, so its message is not reclaimed.

        Returns False when the message is no longer held by this worker.
        """
        return self._heartbeat()

    @property
    def cancelled(self) -> bool:
        """True once the attempt should stop: its time limit passed, the worker is
        shutting down, or someone called `cancel(id)` (seen within a second)."""
        return self._cancel.is_set()

    def set_progress(self, value: Any) -> None:
        """Make `value` (any JSON value) the task's progress, as `lookup(id).progress`.

        Written with the worker's next heartbeat (within a second), not one round trip
        per call: call it as often as you like.

        Raises:
            ValueError: `value` is not JSON, or its JSON is over 64 KiB
                (`core.records.VALUE_MAX_BYTES`).
        """
        self._progress(value)

    @property
    def parent_result(self) -> Any:
        """In a workflow: the return value of the step before (None for the first), or
        for a step after a group the list of its members' results in order (None for a
        member that failed). Read from their task records on first use, then kept."""
        if not hasattr(self, "_parent_value"):
            self._parent_value = self._parent()
        return self._parent_value

    # --- durable steps (core/py, docs/md) ---
    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once per task id and keep its JSON result: a later
        attempt of this task id returns the kept result without calling `fn`. For an
        `async def fn`, await it: `await ctx.step(...)`.

        Raises:
            DuplicateStep: `name` was used already in this attempt.
            InvalidTaskPayload: `fn` returned a value that is not JSON (nothing is kept).
            ValueError: `name` is empty or over 200 characters.
            RuntimeError: this context belongs to no running task.
        """
        if self._steps is None:
            raise RuntimeError("ctx.step needs the context of a running task")
        if inspect.iscoroutinefunction(fn):
            return self._steps.arun(name, fn, args, kwargs)
        return self._steps.run(name, fn, args, kwargs)

    def step_key(self, name: str) -> str:
        """A stable string for this task id and step: an idempotency key for an external
        API, the same on every attempt."""
        return step_key(self.id, name)
    # --- end of durable steps ---


# Durable steps: `ctx.step(name, fn, ...)` runs `fn` once per task id and keeps its JSON
# result, so a retry, a reclaim or a re-run of the same task id returns it without calling
# `fn` again (docs/md).
#
# The kept steps are read lazily, once per attempt, on the first `ctx.step` call (a task
# that uses no step costs nothing), and each step is written with one round trip right
# after `fn` returns. The first run of a task id (`first_run`: most tasks) reads nothing,
# since nothing can be kept yet: its first step costs one round trip, not two. A step
# whose `fn` raised keeps nothing. The hash lives as long as the task's record: each
# record write gives it the record's TTL (`record_write.lua`), a step kept gives it the
# pending record's; once it expired, a step runs again.

NAME_MAX = 200  # characters of a step name

Load = Callable[[], dict[str, str]]
Keep = Callable[[str, str], None]


class Steps:
    """The steps of one attempt of one task id: what was kept before, what ran now."""

    def __init__(self, task_id: str, task_name: str, load: Load, keep: Keep,
                 first_run: bool = False, on_keep: Callable[[], None] | None = None) -> None:
        self.task_id = task_id
        self.task_name = task_name
        self._load = load
        self._keep = keep
        self._on_keep = on_keep
        # None: not read yet. The first run of a task id has nothing kept to read.
        self._kept: dict[str, str] | None = {} if first_run else None
        self._seen: set[str] = set()

    def run(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """The kept result of step `name`, or `fn(*args, **kwargs)`'s, kept now."""
        self.claim(name)
        if self._kept is None:
            self._kept = self._load()
        if name in self._kept:
            return json.loads(self._kept[name])["result"]
        return self.keep(name, fn(*args, **kwargs))

    async def arun(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """`run` for an `async def fn`: Redis is reached off the event loop."""
        import asyncio

        self.claim(name)
        if self._kept is None:
            self._kept = await asyncio.to_thread(self._load)
        if name in self._kept:
            return json.loads(self._kept[name])["result"]
        result = await fn(*args, **kwargs)
        return await asyncio.to_thread(self.keep, name, result)

    def claim(self, name: str) -> None:
        """Refuse a bad or repeated name before anything runs."""
        if not isinstance(name, str) or not name or len(name) > NAME_MAX:
            raise ValueError(f"a step name must be a non-empty string of at most {NAME_MAX} "
                             f"characters, not {name!r:.60}")
        if name in self._seen:
            raise DuplicateStep(f"step {name!r} ran already in this attempt of task "
                                f"{self.task_name} (id {self.task_id}): step names are unique")
        self._seen.add(name)

    def keep(self, name: str, result: Any) -> Any:
        """Keep `result` as step `name`'s; what a later attempt will read back."""
        try:
            encoded = json.dumps({"result": result, "at": time.time()}, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidTaskPayload(f"step {name!r} of task {self.task_name} returned a "
                                     f"value that is not JSON: {exc}",
                                     task_name=self.task_name) from exc
        self._keep(name, encoded)
        if self._on_keep is not None:
            self._on_keep()
        assert self._kept is not None
        self._kept[name] = encoded
        return json.loads(encoded)["result"]


def step_key(task_id: str, name: str) -> str:
    """A stable string per task id and step: an idempotency key for an external API."""
    return f"{task_id}:{name}"


def decode_kept(kept: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Kept steps as `{name: {"result": ..., "at": unix seconds}}` (for `rec.steps`)."""
    return {name: json.loads(value) for name, value in kept.items()}


def stored_steps(store: Store, task_id: str, task_name: str, ttl_s: int, *,
                 first_run: bool = False, on_keep: Callable[[], None] | None = None) -> Steps:
    """The steps of a worker's attempt, kept in Redis for `ttl_s` after each step (the
    running record's TTL); built per attempt: cheap, no I/O. `first_run`: see there;
    `on_keep`: called after each step kept."""
    steps = store.steps
    return Steps(task_id, task_name, partial(steps.load, task_id),
                 partial(steps.keep, task_id, ttl_seconds=ttl_s), first_run, on_keep)


def first_run(message: TaskMessage, runs: int | None) -> bool:
    """True when no earlier run of `message`'s task id can have kept a step: attempt 1,
    its first delivery (`runs` None: not reclaimed nor handed to a sibling), never put
    back after a run may have started (`ran_before`), under an id no caller chose (a
    `task_id`, an admin retry of a failed row with steps, may name an earlier run's)."""
    return (message.attempt == 1 and runs is None and not message.ran_before
            and not message.has_task_id)


def shown(steps: dict[str, dict[str, Any]]) -> list[tuple[str, str, datetime]]:
    """Kept steps as (name, indented JSON result, kept at) in the order they were kept,
    for the admin's task page."""
    rows = sorted(steps.items(), key=lambda item: item[1].get("at", 0))
    return [(name, json.dumps(step.get("result"), indent=2, ensure_ascii=False, sort_keys=True),
             datetime.fromtimestamp(step.get("at", 0), UTC)) for name, step in rows]


def kept_steps(task_id: str) -> dict[str, dict[str, Any]]:
    """The kept steps of `task_id` under the current settings (for `lookup(id).steps`)."""
    return decode_kept(get_store().steps.load(task_id))


def with_kept_steps(task_ids: list[str], ttl_s: int) -> set[str]:
    """The task ids among `task_ids` that kept steps, their steps kept `ttl_s` more (the
    dispatched record's TTL): an admin retry of their failed rows dispatches them again
    under the same id, so the steps hold."""
    if not task_ids:
        return set()
    return get_store().steps.holders(task_ids, ttl_s)


_eager: dict[str, dict[str, str]] = {}


def eager_steps(task_id: str, task_name: str) -> Steps:
    """The steps of an eager attempt, kept in this process for the call."""
    kept = _eager.setdefault(task_id, {})
    return Steps(task_id, task_name, lambda: dict(kept), kept.__setitem__)


def forget_eager(task_id: str) -> None:
    """The eager call ended: drop what its steps kept."""
    _eager.pop(task_id, None)
