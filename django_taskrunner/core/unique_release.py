"""When a unique lock and a task_id are freed, and the release by their holder.

Each unique mode frees its lock at a point of the message's life (`RELEASE_ON`); a
task_id is freed once the task finished for good and renewed when an attempt starts.
The worker calls `release_with`, which compares the whole holder value
(`unique_holder.holder_value`) first, so an older run never frees what a newer dispatch
took; the admin frees one lock by the value it shows (`release_held`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.unique_holder import holder_value
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.locks import UniqueLocks

# The name these lines were logged under before this module was split off
# `core/unique.py`: logging configurations name it.
logger = logging.getLogger("django_taskrunner.core.unique")

# A task_id stays reserved this long after its dispatch (after its due time when
# delayed); each attempt a worker starts renews it. Finishing for good frees it at once,
# so the TTL only matters for a task that is lost or stuck far longer than any lock.
TASK_ID_TTL_MS = 7 * 24 * 3600 * 1000

# Points in a message's life at which the worker frees what it holds.
STARTED = "started"  # a worker is about to run an attempt
SUCCEEDED = "succeeded"  # the task returned
FAILED = "failed"  # the last attempt raised: failed for good
DROPPED = "dropped"  # never run: expired, or no task has its name
CANCELLED = "cancelled"  # an operator cancelled it in the admin: frees it in every mode

RELEASE_ON: dict[str, frozenset[str]] = {
    "until_finished": frozenset({SUCCEEDED, FAILED, DROPPED, CANCELLED}),
    "until_executed": frozenset({SUCCEEDED, DROPPED, CANCELLED}),
    "until_executing": frozenset({STARTED, DROPPED, CANCELLED}),
    "while_locked": frozenset({CANCELLED}),
    # The lock lives as long as the quiet period; once the task starts, a new one opens.
    "debounce": frozenset({STARTED, DROPPED, CANCELLED}),
}
TASK_ID_FREED_ON = frozenset({SUCCEEDED, FAILED, DROPPED, CANCELLED})

# A release retries a short Redis outage (a task_id left behind would stay reserved
# for TASK_ID_TTL_MS); None ends the attempts.
RELEASE_RETRY_PAUSES = (0.1, 0.5, None)


def _actions(prefix: str, message: TaskMessage, event: str) -> list[tuple[str, str]]:
    """(key, '0' to delete | TTL ms to renew | 'follow') for what `message` frees at
    `event`; a lock's mode record follows its lock (release_lock.lua)."""
    actions: list[tuple[str, str]] = []
    if message.lock_key:
        freed_on = RELEASE_ON.get(message.unique_mode or "", RELEASE_ON["until_finished"])
        if event in freed_on:
            actions.append((message.lock_key, "0"))
            mode_key = _mode_key(prefix, message)
            if mode_key is not None:
                actions.append((mode_key, "follow"))
    if message.has_task_id:
        id_key = keys.task_id_key(prefix, message.queue, message.id)
        if event in TASK_ID_FREED_ON:
            actions.append((id_key, "0"))
        elif event == STARTED:
            actions.append((id_key, str(TASK_ID_TTL_MS)))
    return actions


def release(client: Any, prefix: str, message: TaskMessage, event: str) -> None:
    """`release_with` on the locks of `client` (only handed to the store) and `prefix`."""
    release_with(UniqueLocks(client, prefix), message, event)


def release_with(store: UniqueLocks, message: TaskMessage, event: str) -> None:
    """Free (or renew) what `message` holds at `event`; only if this dispatch of it is
    still the holder (its id and dispatch token, `holder_value`).

    A key already gone or held by another task is logged, never raised; so is Redis
    being down (the lock then frees at its TTL).
    """
    actions = _actions(store.prefix, message, event)
    if not actions:
        return
    replies = _release_retrying(store, message, actions)
    if replies is None:
        return
    for (key, action), reply in zip(actions, replies, strict=True):
        if action == "follow":
            continue
        if reply == 0:
            logger.debug("task=%s id=%s: %s was already gone (expired or freed)",
                         message.task_name, message.id, key)
        elif reply != 1:
            logger.info("task=%s id=%s: %s is now held by %s; left alone", message.task_name,
                        message.id, key, reply)


def _release_retrying(
    store: UniqueLocks, message: TaskMessage, actions: list[tuple[str, str]]
) -> list[int | str] | None:
    """The store's replies, retrying a short outage; None (logged) once it lasts."""
    for pause in RELEASE_RETRY_PAUSES:
        try:
            return store.release(holder_value(message), actions)
        except REDIS_DOWN as exc:
            if pause is None:
                logger.error("task=%s id=%s: cannot free %s, Redis is unreachable (%s); it "
                             "frees at its TTL", message.task_name, message.id,
                             ", ".join(key for key, _ in actions), exc)
                return None
            time.sleep(pause)
    return None


def _mode_key(prefix: str, message: TaskMessage) -> str | None:
    """The mode record of the lock `message` holds; None for a lock of another layout."""
    try:
        return keys.unique_mode_key(prefix, message.queue, message.lock_key or "")
    except ValueError:
        return None


def release_held(client: Any, prefix: str, queue: str, lock_key: str, holder: str) -> int | str:
    """Free `lock_key` (and its mode record) only while it still holds the value `holder`.

    Returns 1 when freed, 0 when it was already gone, else the value it holds now.
    """
    return UniqueLocks(client, prefix).release_lock(queue, lock_key, holder)
