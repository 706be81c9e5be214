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

This module decides which key, TTL and mode a dispatch takes (`claim_for`), what a held
lock means under on_conflict "return" / "replace" / debounce (`Conflict`,
`reservation_for`), reads the script's reply (`UniqueClaim.settle`), and frees what a message
holds (`release_with`, `release_held`). The commands are `store/locks.py`'s
(`UniqueLocks`), which this module hands plain values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_taskrunner.core import clock, sharding
from django_taskrunner.core.message import DISPATCH_TOKEN, TaskMessage, check_payload, holder_parts
from django_taskrunner.core.options import UNIQUE_MODES, check_on_conflict, check_unique_for
from django_taskrunner.exceptions import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    TaskAlreadyDispatched,
    TaskIdConflict,
    UniqueForRequired,
)
from django_taskrunner.store import Store, entries, keys
from django_taskrunner.store.connection import text
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.locks import Reservation, UniqueLocks

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task
    from django_taskrunner.store.streams import Broker

logger = logging.getLogger(__name__)

TASK_ID_MAX_LENGTH = 200
KeySource = str | Callable[[Any], str] | None

_warned_empty: set[str] = set()
_warned_lock = threading.Lock()


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

# Joins the id and the dispatch token in a lock's value; a token never contains it.
HOLDER_SEPARATOR = "#"


def new_dispatch_token() -> str:
    """16 random hex digits: one dispatch's mark on the lock and task_id it takes."""
    return os.urandom(8).hex()


def holder_value(message: TaskMessage) -> str:
    """What `message` writes to its lock and task_id key, and what its release compares.

    A message queued by an earlier version has no token: its id alone, as it wrote then.
    """
    token = message.dispatch_token
    return message.id if token is None else f"{message.id}{HOLDER_SEPARATOR}{token}"


def holder_id(value: str) -> str:
    """The task id in a lock's or reservation's value: what errors and the admin show."""
    task_id, separator, token = value.rpartition(HOLDER_SEPARATOR)
    if separator and task_id and DISPATCH_TOKEN.fullmatch(token):
        return task_id
    return value


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


def check_task_id(task_id: Any, task_name: str, *, ran_before: bool = False) -> str:
    """A `task_id` is a non-empty printable string of at most 200 characters, not shaped
    as a plain dispatch's id (`entries.entry_task_id`: that id is its stream entry's),
    unless it is the id of a task that ran and finished (`ran_before`: an admin retry
    that keeps its durable steps), whose entry is gone."""
    if (not isinstance(task_id, str) or not task_id or len(task_id) > TASK_ID_MAX_LENGTH
            or not task_id.isprintable()):
        raise InvalidTaskOptions(
            f"task_id of task {task_name!r} must be a non-empty printable string of at most "
            f"{TASK_ID_MAX_LENGTH} characters, not {task_id!r}"
        )
    if not ran_before and entries.task_id_entry(task_id) is not None:
        raise InvalidTaskOptions(
            f"task_id of task {task_name!r} may not have the shape <stream id>@<queue> "
            f"({task_id!r}): that is the id of a plain dispatch's stream entry")
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
class UniqueClaim:
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
) -> UniqueClaim | None:
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
        return UniqueClaim(task.name, message.id, None, id_key, shard=shard, holder=holder)
    message.lock_key, message.unique_mode = lock.key, lock.mode
    return UniqueClaim(task.name, message.id, lock, id_key,
                 mode_key=keys.unique_mode_key(prefix, shard, lock.key), shard=shard,
                 holder=holder)


def enqueue(
    store: Store, claim: UniqueClaim, destination: str, body: str, due_ms: int | None = None,
    wake_channel: str = "",
) -> str:
    """Take the claim and add the message in one script: one round trip, all or nothing.

    `destination` is the queue's stream (`due_ms=None`: XADD now, returns the stream id)
    or its delayed set (ZADD at `due_ms`, returns "delayed"), by `store.locks`. Raises
    `TaskIdConflict` / `TaskAlreadyDispatched` (with the holder's id) on contention. For
    a claim under on_conflict "raise" only (its `reservation` refuses the others):
    dispatch goes through `reservation_for` and `UniqueClaim.settle`.
    """
    return claim.read_reply(store.locks.add_reserved(
        claim.reservation(destination, body, due_ms, wake_channel)))


# A held lock under on_conflict "return" or "replace" (and a debounce): the script reads
# the holder's body, or swaps the holder's payload in when the holder has not started;
# for that it needs the queue's other structure (the delayed set of a stream dispatch, or
# the stream of a delayed one), the consumer group, and the new body cut around its id.


@dataclass(frozen=True)
class Conflict:
    """What enqueue.lua needs to act on a held lock for "return" or "replace": the
    queue's other structure, the consumer group, and the body cut around its id."""

    other: str
    group: str
    head: str = ""
    rest: str = ""


def conflict_for(
    claim: UniqueClaim, message: TaskMessage, body: str, other: str, group: str,
) -> Conflict | None:
    """The `Conflict` of a claim whose policy is not "raise", else None."""
    if claim.policy == "raise":
        return None
    head, rest = holder_parts(body, message) if claim.policy != "return" else ("", "")
    return Conflict(other, group, head, rest)


def reservation_for(
    claim: UniqueClaim, broker: Broker, message: TaskMessage, body: str, due_ms: int | None = None,
) -> Reservation:
    """The claim's reservation on `broker`: to the stream (`due_ms` None) or the delayed
    set, with what a held lock needs under the claim's policy."""
    level = keys.level_name(claim.shard, message.priority)  # the shard's, unless a priority
    stream = broker.stream(level)
    delayed = keys.delayed_key(broker.prefix, level)
    if due_ms is None:
        destination, other, wake = stream, delayed, ""
    else:
        destination, other, wake = delayed, stream, keys.wake_channel(broker.prefix, claim.shard)
    conflict = conflict_for(claim, message, body, other, broker.group)
    return claim.reservation(destination, body, due_ms, wake, conflict)


# The release: each unique mode frees its lock at a point of the message's life
# (`RELEASE_ON`); a task_id is freed once the task finished for good and renewed when an
# attempt starts. The worker calls `release_with`, which compares the whole holder value
# first; the admin frees one lock by the value it shows (`release_held`).


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


def release(store: Store, message: TaskMessage, event: str) -> None:
    """`release_with` on the locks of `store`."""
    release_with(store.locks, message, event)


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


def release_held(store: Store, queue: str, lock_key: str, holder: str) -> int | str:
    """Free `lock_key` (and its mode record) only while it still holds the value `holder`.

    Returns 1 when freed, 0 when it was already gone, else the value it holds now.
    """
    return store.locks.release_lock(queue, lock_key, holder)
