"""Unique tasks and task ids: lock keys, the atomic lock-and-add, release by the holder.

A unique dispatch takes the lock `<prefix>:{<queue>}:unique:<task>[:<key>]` (TTL:
`unique_for`), a `task_id` dispatch reserves `<prefix>:{<queue>}:id:<task_id>`, and
either adds its message in the same Lua script (`store/lua/enqueue.lua`), so there is never
a lock without its message. Next to a lock, `<prefix>:{<queue>}:unique-mode:<task>[:<key>]`
records its mode with the same TTL, for the admin; it is deleted together with its lock.

Both values are the holder: the message id, `#`, and a token drawn for that dispatch
(`holder_value`). The id alone cannot tell two dispatches of one `task_id` apart, and the
stale run of the first (a stalled worker, resumed after another one reclaimed and
finished it) would free the second's lock and reservation. The worker frees what a
message holds at the point its mode names (`RELEASE_ON`), comparing the whole value first,
so an older task never frees what a newer dispatch took. Errors and the admin show the id
alone (`holder_id`).

This module decides which key, TTL and mode a dispatch takes (`claim_for`) and reads
the script's reply; the holder value is `unique_holder.py`'s, what a held lock means
under on_conflict `unique_conflict.py`'s, what to free when `unique_release.py`'s. The
commands are `store/locks.py`'s (`UniqueLocks`), which these modules hand plain values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_taskrunner.core import clock
from django_taskrunner.core.message import TaskMessage, check_payload
from django_taskrunner.core.options import UNIQUE_MODES, check_on_conflict, check_unique_for
from django_taskrunner.core.unique_conflict import Conflict, conflict_for, reservation_for
from django_taskrunner.core.unique_holder import (
    HOLDER_SEPARATOR,
    holder_id,
    holder_value,
    new_dispatch_token,
)
from django_taskrunner.core.unique_release import (
    CANCELLED,
    DROPPED,
    FAILED,
    RELEASE_ON,
    STARTED,
    SUCCEEDED,
    TASK_ID_FREED_ON,
    TASK_ID_TTL_MS,
    release,
    release_held,
    release_with,
)
from django_taskrunner.exceptions import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    TaskAlreadyDispatched,
    TaskIdConflict,
    UniqueForRequired,
)
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.locks import Reservation, UniqueLocks
from django_taskrunner.store.values import text

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task

# The holder, the conflict policy and the release are split off into
# core/unique_holder.py, unique_conflict.py and unique_release.py; their names stay
# importable from here, where the worker, the admin and the outbox import them.
__all__ = [
    "CANCELLED", "DROPPED", "FAILED", "HOLDER_SEPARATOR", "RELEASE_ON", "STARTED",
    "SUCCEEDED", "TASK_ID_FREED_ON", "TASK_ID_MAX_LENGTH", "TASK_ID_TTL_MS", "Claim",
    "Conflict", "KeySource", "LockSpec", "check_task_id", "claim_for", "conflict_for",
    "derive_key", "enqueue", "holder_id", "holder_message", "holder_value", "lock_spec",
    "new_dispatch_token", "payload_key", "release", "release_held", "release_with",
    "reservation_for",
]

logger = logging.getLogger(__name__)

TASK_ID_MAX_LENGTH = 200
KeySource = str | Callable[[Any], str] | None

_warned_empty: set[str] = set()
_warned_lock = threading.Lock()


def payload_key(payload: Any) -> str:
    """The SHA-256 (hex) of the payload's canonical JSON, for `@task(unique_key=payload_key)`.

    Keys are sorted and spacing fixed, so payloads equal as JSON are duplicates whatever
    their dict order; the task name and queue are already part of the lock key.
    """
    try:
        data = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")  # a lone surrogate: ValueError
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTaskPayload(f"payload is not JSON-serialisable: {exc}") from exc
    return hashlib.sha256(data).hexdigest()


def check_task_id(task_id: Any, task_name: str) -> str:
    """A `task_id` is a non-empty printable string of at most 200 characters."""
    if (not isinstance(task_id, str) or not task_id or len(task_id) > TASK_ID_MAX_LENGTH
            or not task_id.isprintable()):
        raise InvalidTaskOptions(
            f"task_id of task {task_name!r} must be a non-empty printable string of at most "
            f"{TASK_ID_MAX_LENGTH} characters, not {task_id!r}"
        )
    return task_id


def _warn_empty_key(task_name: str) -> None:
    with _warned_lock:
        if task_name in _warned_empty:
            return
        _warned_empty.add(task_name)
    logger.warning("unique task %s has an empty unique_key: one lock covers the whole task, "
                   "whatever the payload", task_name)


def derive_key(task: Task, payload: Any, source: KeySource) -> str:
    """The unique key part from a key function, a fixed string, or None (empty)."""
    if source is None:
        key: Any = ""
    elif isinstance(source, str):
        key = source
    elif callable(source):
        try:
            key = source(payload)
        except InvalidTaskPayload as exc:
            raise InvalidTaskPayload(f"payload of task {task.name!r}: {exc}",
                                     task_name=task.name) from exc
        except Exception as exc:
            raise InvalidTaskOptions(f"unique_key of task {task.name!r} raised "
                                     f"{type(exc).__name__}: {exc}") from exc
    else:
        raise InvalidTaskOptions(f"unique_key of task {task.name!r} must be a string or a "
                                 f"callable(payload) -> str, not {source!r}")
    if not isinstance(key, str):
        raise InvalidTaskOptions(f"unique_key of task {task.name!r} returned "
                                 f"{type(key).__name__} {key!r}; it must return a str")
    if not key:
        _warn_empty_key(task.name)
    return key


@dataclass(frozen=True)
class LockSpec:
    """The unique lock one dispatch takes: its Redis key, TTL and release mode."""

    key: str
    ttl_ms: int
    mode: str
    # The shard the lock (and so the message) lives in; the queue when it is not split.
    shard: str = field(default="", compare=False)
    # What this dispatch does when the lock is held: "raise", "return" or "replace"
    # ("debounce" for that mode: the waiting holder takes the payload and a later start).
    on_conflict: str = "raise"

    @property
    def debounce_ms(self) -> int | None:
        """The quiet period of a debounce lock (its TTL), else None."""
        return self.ttl_ms if self.mode == "debounce" else None


def lock_spec(
    task: Task, payload: Any, queue: str, prefix: str, *, unique_key: KeySource = None,
    unique_for: Any = None, unique_mode: Any = None, on_conflict: Any = None,
) -> LockSpec | None:
    """The lock a dispatch takes, or None; any unique override makes the call unique."""
    options = task.options
    overridden = unique_key is not None or unique_for is not None or unique_mode is not None
    if not options.unique and not overridden and options.unique_mode != "debounce":
        if on_conflict is not None and on_conflict != "raise":
            raise InvalidTaskOptions(
                f"dispatch of task {task.name!r} is not unique, so on_conflict="
                f"{on_conflict!r} has no lock to meet; make it unique or leave it out")
        return None
    check_payload(payload, task.name)  # before a key function walks the payload
    policy = check_on_conflict(on_conflict if on_conflict is not None else options.on_conflict,
                               task.name)
    mode = unique_mode if unique_mode is not None else options.unique_mode
    if mode not in UNIQUE_MODES:
        raise InvalidTaskOptions(f"unique_mode of task {task.name!r} must be one of "
                                 f"{', '.join(UNIQUE_MODES)}, not {mode!r}")
    if mode == "debounce":
        # Every dispatch in the quiet period replaces the waiting one: the lock lives
        # as long as the period, whatever unique_for says.
        if options.debounce is None:
            raise InvalidTaskOptions(f"dispatch of task {task.name!r} with unique_mode="
                                     f"'debounce' needs @task(debounce=SECONDS) on the task")
        ttl, policy = float(options.debounce), "debounce"
    else:
        seconds = unique_for if unique_for is not None else options.unique_for
        if seconds is None:
            raise UniqueForRequired(
                f"dispatch of task {task.name!r} is unique but has no unique_for: pass "
                f"unique_for=SECONDS (the lock's TTL) or declare it on the task"
            )
        ttl = check_unique_for(seconds, task.name)
    source = unique_key if unique_key is not None else options.unique_key
    part = derive_key(task, payload, source)
    shard = sharding.shard_for(queue, f"{task.name}\x00{part}")
    return LockSpec(keys.unique_key(prefix, shard, task.name, part), round(ttl * 1000), mode,
                    shard, policy)


@dataclass(frozen=True)
class Claim:
    """What one dispatch reserves while adding its message (see `store/lua/enqueue.lua`)."""

    task_name: str
    holder_id: str  # the message id, as errors name the holder
    lock: LockSpec | None
    id_key: str | None
    mode_key: str | None = None  # where the lock's mode is recorded (keys.unique_mode_key)
    shard: str = ""  # where the message goes: its lock and id key live in this shard
    # The value written to the lock and the id key (`holder_value`); "" means `holder_id`.
    holder: str = ""

    @property
    def value(self) -> str:
        """What the lock and the id key hold once this claim is taken."""
        return self.holder or self.holder_id

    def reservation(
        self, destination: str, body: str, due_ms: int | None, wake_channel: str = "",
        conflict: Conflict | None = None,
    ) -> Reservation:
        """What the store writes for this claim: the message with its lock / task_id.

        A task_id queued for later stays reserved `TASK_ID_TTL_MS` past its due time.
        With a `conflict` (a policy other than "raise"), what a held lock means.
        """
        lock = self.lock
        id_ttl_ms = 0
        if self.id_key is not None:
            id_ttl_ms = TASK_ID_TTL_MS + (0 if due_ms is None else max(0, due_ms - clock.now_ms()))
        extra: dict[str, Any] = {}
        if lock is not None and lock.on_conflict != "raise":  # "" means "raise" to the script
            extra["policy"] = lock.on_conflict
        if conflict is None and self.policy != "raise":
            raise ValueError(f"a claim with on_conflict={self.policy!r} needs its Conflict")
        if conflict is not None:
            extra.update(other=conflict.other, group=conflict.group, head=conflict.head,
                         rest=conflict.rest)
        return Reservation(
            destination=destination, body=body, holder=self.value, due_ms=due_ms,
            wake_channel=wake_channel, lock_key=None if lock is None else lock.key,
            lock_ttl_ms=0 if lock is None else lock.ttl_ms, mode_key=self.mode_key,
            mode="" if lock is None else lock.mode, id_key=self.id_key, id_ttl_ms=id_ttl_ms,
            **extra)

    @property
    def policy(self) -> str:
        """What this dispatch does on a held lock ("raise" without a lock)."""
        return "raise" if self.lock is None else self.lock.on_conflict

    def settle(self, reply: Sequence[Any], message: TaskMessage) -> TaskMessage:
        """The message a dispatch returns, from the script's reply: `message` queued (with
        its stream id), or the holder's (policy "return"), or `message` under the
        holder's id and token once the holder took its payload ("replace")."""
        status = text(reply[0])
        if status == "replaced":
            holder = text(reply[1])
            message.id = holder_id(holder)
            token = holder[len(message.id) + 1:]
            message.dispatch_token = token or None
            value = text(reply[2])
            message.stream_id = None if value == "delayed" else value
            return message
        if status == "lock" and self.policy == "return" and self.lock is not None:
            return holder_message(text(reply[1]), reply[2] if len(reply) > 2 else None,
                                  message, self.lock)
        message.stream_id = self.read_reply(reply)
        return message

    def script_call(
        self, destination: str, body: str, due_ms: int | None, wake_channel: str = ""
    ) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of enqueue.lua for this claim."""
        return self.reservation(destination, body, due_ms, wake_channel).script_call()

    def read_reply(self, reply: Sequence[Any]) -> str:
        """The stream id (or "delayed") from the script's reply; raises on contention."""
        status, value = text(reply[0]), text(reply[1])
        if status == "ok":
            return value
        if status == "id" and self.id_key is not None:
            raise TaskIdConflict(self.task_name, self.holder_id, self.id_key)
        if status == "lock" and self.lock is not None:
            raise TaskAlreadyDispatched(self.task_name, holder_id(value), self.lock.key)
        raise RuntimeError(f"unexpected reply from enqueue.lua: {reply!r}")


def holder_message(
    holder: str, body: Any, message: TaskMessage, lock: LockSpec
) -> TaskMessage:
    """The holder's message for on_conflict="return": decoded from its body when it is
    still queued or delayed, else built from the lock (its id, task and queue)."""
    if body:
        try:
            found = TaskMessage.from_json(body)
        except InvalidTaskPayload:
            found = None
        if found is not None and holder_value(found) == holder:
            return found
    return TaskMessage(id=holder_id(holder), task_name=message.task_name, queue=message.queue,
                       payload=None, lock_key=lock.key, unique_mode=lock.mode)


def claim_for(
    task: Task, message: TaskMessage, prefix: str, *, unique_key: KeySource = None,
    unique_for: Any = None, unique_mode: Any = None, on_conflict: Any = None,
) -> Claim | None:
    """What `message` must reserve, or None for a plain dispatch (one XADD).

    Records the lock's key and mode on the message, and draws its dispatch token, so the
    worker can free what this dispatch took and nothing another one took. On a
    queue split into shards, the lock decides the shard (else the task_id does); a
    dispatch with both is refused there, because a second dispatch of the same task_id
    with another unique key would land in another shard and not meet the reservation.
    """
    lock = lock_spec(task, message.payload, message.queue, prefix, unique_key=unique_key,
                     unique_for=unique_for, unique_mode=unique_mode, on_conflict=on_conflict)
    if lock is None and not message.has_task_id:
        return None
    if lock is not None and message.has_task_id and sharding.shard_count(message.queue) > 1:
        raise InvalidTaskOptions(
            f"task {task.name!r}: queue {message.queue!r} is split into shards, where a "
            f"dispatch cannot be both unique and carry a task_id; use one of the two")
    shard = lock.shard if lock is not None else sharding.shard_for(message.queue, message.id)
    id_key = keys.task_id_key(prefix, shard, message.id) if message.has_task_id else None
    message.dispatch_token = new_dispatch_token()
    holder = holder_value(message)
    if lock is None:
        return Claim(task.name, message.id, None, id_key, shard=shard, holder=holder)
    message.lock_key, message.unique_mode = lock.key, lock.mode
    return Claim(task.name, message.id, lock, id_key,
                 mode_key=keys.unique_mode_key(prefix, shard, lock.key), shard=shard,
                 holder=holder)


def enqueue(
    client: Any, claim: Claim, destination: str, body: str, due_ms: int | None = None,
    wake_channel: str = "",
) -> str:
    """Take the claim and add the message in one script: one round trip, all or nothing.

    `destination` is the queue's stream (`due_ms=None`: XADD now, returns the stream id)
    or its delayed set (ZADD at `due_ms`, returns "delayed"). `client` is only handed to
    the store (`UniqueLocks`). Raises `TaskIdConflict` / `TaskAlreadyDispatched` (with the
    holder's id) on contention. For a claim under on_conflict "raise" only (its
    `reservation` refuses the others): dispatch goes through `reservation_for` and
    `Claim.settle`.
    """
    store = UniqueLocks(client, "")
    return claim.read_reply(store.add_reserved(claim.reservation(destination, body, due_ms,
                                                                 wake_channel)))
