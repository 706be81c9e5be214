"""The admin's "Unique locks" page: every held unique lock, found with SCAN, with its
queue, task, key, holder, mode, conflict policy and time left, and a "Release" action.

Listing needs the "view" permission of `UniqueLock`, releasing "release_uniquelock".
A release is POST only (CSRF-checked), asks for confirmation first, and is value-guarded:
it frees a lock only while the holder shown on the page still holds it, so a lock a newer
task took meanwhile is never freed.

Locks are paged by SCAN position (`shared.Position`), never read all at once. A lock's
mode comes from its mode record (`keys.unique_mode_key`, written with the lock by
`store/lua/enqueue.lua`); a lock taken before mode records existed shows its task's
declared mode, marked as such. The record also names the holder's conflict policy
(`on_conflict`, or "debounce"), shown next to the mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    QueryDict,
)
from django.urls import URLPattern, reverse
from django.utils.http import urlencode

from django_taskrunner.admin.shared import (
    PAGE_SIZE,
    SCAN_COUNT,
    Position,
    RedisPageAdmin,
    page_path,
    scan_keys_page,
)
from django_taskrunner.conf import QUEUE_NAME
from django_taskrunner.core import unique as locks
from django_taskrunner.core.registry import registry
from django_taskrunner.stats.figures import dashboard_queues
from django_taskrunner.store import Store, get_store, keys
from django_taskrunner.store.errors import REDIS_ERROR
from django_taskrunner.store.locks import UniqueLocks

RELEASE_PERMISSION = "django_taskrunner.release_uniquelock"
MAX_SELECTED = 500
OUTCOMES = {
    "released": ("Released {n} lock(s).", messages.SUCCESS),
    "retaken": ("{n} lock(s) were left alone: a newer task holds them now.", messages.WARNING),
    "gone": ("{n} lock(s) had already been freed or had expired.", messages.WARNING),
}


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


def scan_page(store: Store, at: Position | None = None, *, queue: str = "",
              text: str = "", size: int = PAGE_SIZE) -> LockPage:
    """`scan_locks` on the locks of `store`."""
    return scan_locks(store.locks, at, queue=queue, text=text, size=size)


def scan_locks(store: UniqueLocks, at: Position | None = None, *, queue: str = "",
               text: str = "", size: int = PAGE_SIZE,
               scan_count: int = SCAN_COUNT) -> LockPage:
    """At most `size` held locks from `at` on, found with at most MAX_SCAN_CALLS SCANs."""
    found, following, calls = scan_keys_page(store, at or Position(),
                                             pattern(store.prefix, queue, text), size,
                                             scan_count)
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


def release_lock(store: UniqueLocks, lock_key: str, holder: str) -> str:
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


def lock_ref(lock: HeldLock) -> str:
    """What a checkbox posts: the lock key and the value (holder) it was shown with."""
    return json.dumps([lock.key, lock.holder_value], ensure_ascii=False)


def parse_lock_ref(ref: str) -> tuple[str, str] | None:
    try:
        key, holder = json.loads(ref)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(key, str) or not isinstance(holder, str) or not holder:
        return None
    return key, holder


def _filters_query(query: str) -> str:
    """The page's filters (queue, text) from a posted query string, and nothing else."""
    given = QueryDict(query)
    queue = given.get("queue", "")
    return urlencode({"queue": queue if QUEUE_NAME.match(queue) else "",
                      "q": given.get("q", "")[:200]})


class UniqueLockAdmin(RedisPageAdmin):
    """No database table: the locks read from Redis, with a value-guarded release."""

    title = "Unique locks"
    scan_count = SCAN_COUNT  # keys Redis examines per SCAN call

    def get_urls(self) -> list[URLPattern]:
        return [page_path(self, "", self.changelist_view, "changelist"),
                page_path(self, "release/", self.release_view, "release")]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of held locks, optionally of one queue or with a text in their key."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        queue = request.GET.get("queue", "")
        queue = queue if QUEUE_NAME.match(queue) else ""
        text = request.GET.get("q", "").strip()[:200]
        at = Position.parse(request.GET.get("at"))
        broker = get_store().streams
        try:
            page = scan_locks(broker.store.locks, at, queue=queue, text=text,
                              scan_count=self.scan_count)
            queues = dashboard_queues(broker)
        except REDIS_ERROR as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        filters = {"queue": queue, "q": text}
        return self.render(request, "change_list.html", {
            "locks": [(lock, lock_ref(lock)) for lock in page.locks], "queues": queues,
            "queue": queue, "query": text, "first_page": str(at) == "0.0.0",
            "next_query": urlencode({**filters, "at": str(page.next)}) if page.next else "",
            "filter_query": urlencode(filters),
            "can_release": request.user.has_perm(RELEASE_PERMISSION),
            "release_url": reverse(self.url_name("release")),
        })

    def release_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: show the locks and their holders now, then release on "yes"."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(RELEASE_PERMISSION):
            raise PermissionDenied
        refs = request.POST.getlist("selected")
        parsed = [found for ref in refs if (found := parse_lock_ref(ref))]
        if len(parsed) != len(refs) or len(refs) > MAX_SELECTED:
            return HttpResponseBadRequest("malformed or too many locks selected")
        back_query = _filters_query(request.POST.get("back", ""))
        back = f"{reverse(self.url_name('changelist'))}?{back_query}"
        if not parsed:
            self.message_user(request, "Select at least one lock.", messages.WARNING)
            return HttpResponseRedirect(back)
        broker = get_store().streams
        if any(parse_key(broker.prefix, key) is None for key, _ in parsed):
            return HttpResponseBadRequest("not a unique lock of this site")
        if request.POST.get("confirm") != "yes":
            return self._confirm(request, parsed, back, back_query)
        counts = {outcome: 0 for outcome in OUTCOMES}
        for key, holder in parsed:
            counts[release_lock(broker.store.locks, key, holder)] += 1
        for outcome, count in counts.items():
            if count:
                text, level = OUTCOMES[outcome]
                self.message_user(request, text.format(n=count), level)
        return HttpResponseRedirect(back)

    def _confirm(self, request: HttpRequest, parsed: list[tuple[str, str]], back: str,
                 back_query: str) -> HttpResponse:
        broker = get_store().streams
        now = {lock.key: lock for lock in read_locks(
            broker.store.locks, [key for key, _ in parsed])}
        rows = []
        for key, holder in parsed:
            current = now.get(key)
            state = ("gone" if current is None else
                     "held" if current.holder_value == holder else "retaken")
            rows.append({"key": key, "holder": locks.holder_id(holder), "lock": current,
                         "state": state,
                         "ref": json.dumps([key, holder], ensure_ascii=False)})
        return self.render(request, "confirm.html", {
            "title": "Release unique locks?", "rows": rows,
            "releasable": sum(row["state"] == "held" for row in rows),
            "back_url": back, "back_query": back_query,
            "release_url": reverse(self.url_name("release")),
        })
