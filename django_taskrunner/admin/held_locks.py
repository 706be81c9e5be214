"""Finding and releasing held unique locks, for the admin's "Unique locks" page.

Locks are found with SCAN and a MATCH pattern, never KEYS, a bounded number of calls per
page. A page position is a SCAN cursor (with the node, on Redis Cluster) plus how many
matches of that cursor's batch earlier pages already showed, so "next page" links carry
the position and nothing is kept between requests. As with SCAN itself, a lock taken or
freed while someone pages may be shown twice or not at all; every lock held the whole
time is shown once.

A lock's mode comes from its mode record (`keys.unique_mode_key`, written with the lock
by `store/lua/enqueue.lua`); a lock taken before mode records existed shows its task's
declared mode, marked as such. The record also names the holder's conflict policy
(`on_conflict`, or "debounce"), shown next to the mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django_taskrunner.checks import QUEUE_NAME
from django_taskrunner.core import unique as locks
from django_taskrunner.core.registry import registry
from django_taskrunner.store import keys
from django_taskrunner.store.locks import UniqueLocks

PAGE_SIZE = 100
SCAN_COUNT = 500  # keys Redis examines per SCAN call
MAX_SCAN_CALLS = 40  # per page: at most about 20,000 keys examined per page view
POSITION = re.compile(r"^(\d{1,4})\.(\d{1,20})\.(\d{1,6})$")


@dataclass(frozen=True)
class Position:
    """Where a page starts: node index (Redis Cluster), SCAN cursor, matches to skip."""

    node: int = 0
    cursor: int = 0
    skip: int = 0

    def __str__(self) -> str:
        return f"{self.node}.{self.cursor}.{self.skip}"

    @classmethod
    def parse(cls, text: str | None) -> Position:
        """A position from a "next page" link; the first page for anything malformed."""
        match = POSITION.match(text or "")
        if match is None:
            return cls()
        return cls(*(int(group) for group in match.groups()))


@dataclass(frozen=True)
class HeldLock:
    """One lock as the admin shows it."""

    key: str
    queue: str
    task_name: str
    unique_key: str
    holder_id: str  # the holding task's id, as TaskAlreadyDispatched names it
    mode: str | None  # None: not recorded and the task is not registered
    mode_recorded: bool  # False: `mode` is the task's declared mode, not the record
    ttl_ms: int | None  # None: the key has no TTL
    # The lock's value (id and dispatch token): what a release must match.
    holder_value: str = ""
    # What a dispatch meeting the lock does (the holder's on_conflict, else the task's
    # declared one); `policy_recorded` False: the declared one (an older lock).
    policy: str | None = None
    policy_recorded: bool = False

    @property
    def time_left(self) -> str:
        """The TTL for people: "2 h 05 min", "41 s", "no TTL"."""
        if self.ttl_ms is None:
            return "no TTL"
        seconds = self.ttl_ms / 1000
        if seconds < 60:
            return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
        minutes, secs = divmod(round(seconds), 60)
        if minutes < 60:
            return f"{minutes} min {secs:02d} s"
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} d {hours % 24} h"


@dataclass(frozen=True)
class LockPage:
    """One page of held locks and where the next page starts (None: this was the last)."""

    locks: list[HeldLock]
    next: Position | None
    scan_calls: int


def parse_key(prefix: str, key: str) -> tuple[str, str, str] | None:
    """(queue, task name, unique key) of a lock key of `prefix`, or None.

    The task name is the longest registered name the rest starts with; for a task not
    registered here, everything up to the first ":".
    """
    start = f"{prefix}:{{"
    if not key.startswith(start):
        return None
    queue, sep, rest = key[len(start):].partition("}:unique:")
    if not sep or not QUEUE_NAME.match(queue) or not rest:
        return None
    names = [task.name for task in registry if rest == task.name or
             rest.startswith(task.name + ":")]
    if names:
        name = max(names, key=len)
        return queue, name, rest[len(name) + 1:]
    name, _sep, unique_key = rest.partition(":")
    return queue, name, unique_key


def pattern(prefix: str, queue: str = "", text: str = "") -> str:
    """MATCH pattern of the locks of one queue (or all), whose name contains `text`."""
    base = keys.unique_pattern(prefix, queue or "*")
    return f"{base}{keys.glob_escape(text)}*" if text else base


def scan_page(client: Any, prefix: str, at: Position | None = None, *, queue: str = "",
              text: str = "", size: int = PAGE_SIZE) -> LockPage:
    """`scan_locks` on the locks of `client` (only handed to the store) and `prefix`."""
    return scan_locks(UniqueLocks(client, prefix), at, queue=queue, text=text, size=size)


def scan_keys_page(store: UniqueLocks, at: Position, match: str,
                   size: int) -> tuple[list[str], Position | None, int]:
    """At most `size` key names matching `match` from `at` on, found with at most
    MAX_SCAN_CALLS SCANs over every node: (names, the next page's position or None,
    SCAN calls made)."""
    nodes = store.scan_nodes()
    node, cursor, skip = at.node, at.cursor, at.skip
    found: list[str] = []
    calls = 0
    while node < nodes:
        if calls >= MAX_SCAN_CALLS or len(found) >= size:
            return found, Position(node, cursor, 0), calls
        next_cursor, batch = store.scan_keys(node, cursor, match, SCAN_COUNT)
        calls += 1
        batch = batch[skip:]
        room = size - len(found)
        if len(batch) > room:
            return found + batch[:room], Position(node, cursor, skip + room), calls
        found += batch
        cursor, skip = next_cursor, 0
        if cursor == 0:
            node += 1
    return found, None, calls


def scan_locks(store: UniqueLocks, at: Position | None = None, *, queue: str = "",
               text: str = "", size: int = PAGE_SIZE) -> LockPage:
    """At most `size` held locks from `at` on, found with at most MAX_SCAN_CALLS SCANs."""
    found, following, calls = scan_keys_page(store, at or Position(),
                                             pattern(store.prefix, queue, text), size)
    return LockPage(read_locks(store, found), following, calls)


def read_locks(store: UniqueLocks, lock_keys: list[str]) -> list[HeldLock]:
    """The holder, TTL and mode of each key, in one pipelined round trip; keys that are
    not locks of the store's prefix, or were freed meanwhile, are left out."""
    parsed = [(key, found) for key in dict.fromkeys(lock_keys)
              if (found := parse_key(store.prefix, key)) is not None]
    states = store.inspect_many([(queue, key) for key, (queue, _task, _key) in parsed])
    held = []
    for (key, (queue, task_name, unique_key)), state in zip(parsed, states, strict=True):
        if state is None:
            continue
        held.append(HeldLock(
            key=key, queue=queue, task_name=task_name, unique_key=unique_key,
            holder_id=locks.holder_id(state.holder),
            mode=state.mode if state.mode is not None else _declared_mode(task_name),
            mode_recorded=state.mode is not None, ttl_ms=state.ttl_ms,
            holder_value=state.holder,
            policy=state.policy if state.policy is not None else _declared_policy(task_name),
            policy_recorded=state.policy is not None,
        ))
    held.sort(key=lambda lock: (lock.queue, lock.task_name, lock.unique_key))
    return held


def release(store: UniqueLocks, lock_key: str, holder: str) -> str:
    """Free the lock only while it still holds `holder` (a `HeldLock.holder_value`):
    "released", "gone", or "retaken" (a newer dispatch holds it now and keeps it)."""
    parsed = parse_key(store.prefix, lock_key)
    if parsed is None:
        raise ValueError(f"{lock_key!r} is not a unique lock")
    reply = store.release_lock(parsed[0], lock_key, holder)
    if reply == 1:
        return "released"
    return "gone" if reply == 0 else "retaken"


def _declared_mode(task_name: str) -> str | None:
    task = registry.find(task_name)
    return task.options.unique_mode if task is not None else None


def _declared_policy(task_name: str) -> str | None:
    task = registry.find(task_name)
    return task.options.on_conflict if task is not None else None
