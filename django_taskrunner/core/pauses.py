"""Pausing a queue: `pause_queue(name)` / `resume_queue(name)` / `paused_queues()`.

Within a second of a pause no worker starts a new task of the queue: each worker looks
at the paused set every `PAUSE_POLL_S` (`worker/turns.py`), its fetchers stop reading
the queue, and what it had fetched but not started waits in its buffer, still held by
it (nothing lost, no attempt counted) until the resume, or goes back on the stream if the
worker stops. Dispatch, delayed moves and running tasks go on. The pause is a Redis key
without expiry: it outlives worker restarts until resumed.
"""

from __future__ import annotations

from django_taskrunner.conf import QUEUE_NAME
from django_taskrunner.core import clock
from django_taskrunner.exceptions import InvalidTaskOptions, UnreadableData
from django_taskrunner.store import get_store
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, REPLY_ERROR, unavailable
from django_taskrunner.store.schedule import Pauses


def _pauses() -> Pauses:
    return get_store().pauses


def _checked(queue: str) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise InvalidTaskOptions(f"{queue!r} is not a queue name (letters, digits, '.', '_', "
                                 f"'-', at most 100 characters)")
    return queue


def pause_queue(queue: str) -> bool:
    """Stop workers from starting new tasks of `queue` until `resume_queue(queue)`; False
    when it was paused already.

    Raises:
        InvalidTaskOptions: `queue` is not a queue name.
        RedisUnavailable: Redis could not be reached.
        UnreadableData: the paused set's key holds another type.
    """
    name = _checked(queue)
    try:
        return _pauses().pause(name, clock.now_ms())
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot pause queue {name!r}", exc, built_client()) from exc
    except REPLY_ERROR as exc:
        raise UnreadableData("the paused queues", exc) from exc


def resume_queue(queue: str) -> bool:
    """Let workers start tasks of `queue` again; False when it was not paused.

    Raises:
        InvalidTaskOptions: `queue` is not a queue name.
        RedisUnavailable: Redis could not be reached.
        UnreadableData: the paused set's key holds another type.
    """
    name = _checked(queue)
    try:
        return _pauses().resume(name)
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot resume queue {name!r}", exc, built_client()) from exc
    except REPLY_ERROR as exc:
        raise UnreadableData("the paused queues", exc) from exc


def paused_queues() -> dict[str, int]:
    """The paused queues, each with when it was paused (epoch ms).

    Raises:
        RedisUnavailable: Redis could not be reached.
        UnreadableData: the paused set's key holds another type.
    """
    try:
        return _pauses().paused()
    except REDIS_DOWN as exc:
        raise unavailable("cannot read the paused queues", exc, built_client()) from exc
    except REPLY_ERROR as exc:
        raise UnreadableData("the paused queues", exc) from exc
