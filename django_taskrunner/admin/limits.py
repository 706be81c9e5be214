"""The admin's "Limits" page: each rate and concurrency limit key in use, found with SCAN,
with its current use (starts in the current window, or slots held and by whom) and the
tasks waiting on it.

A limit key exists only while in use (a rate log expires one window after its last
start, a slot set with its last lease), so the page shows what is live. Pages go by
SCAN position (`shared.Position`), never reading every key; listing needs the
"view" permission of `Limit`. The page only reads: a limit has nothing to release (a
slot frees with its task, or its lease).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.http import urlencode

from django_taskrunner.admin.shared import PAGE_SIZE, Position, RedisPageAdmin, scan_keys_page
from django_taskrunner.conf import QUEUE_NAME
from django_taskrunner.core import clock
from django_taskrunner.core.options import parse_rate
from django_taskrunner.core.registry import registry
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.errors import REDIS_ERROR
from django_taskrunner.store.limits import Limits

# The window counted for the log of a rate-limited task not registered here.
UNKNOWN_WINDOW_MS = 3_600_000


@dataclass(frozen=True)
class LimitRow:
    """One limit key as the page shows it."""

    kind: str  # "rate" or "concurrency"
    queue: str
    task_name: str
    key: str
    limit: str  # "5/s", "3 at once", or "?" for a task not registered here
    used: int
    holders: tuple[str, ...]
    waiting: int


def parse_limit_key(prefix: str, name: str) -> tuple[str, str, str, str] | None:
    """(kind, queue, task name, key) of a limit key of `prefix`, or None. The task is
    the longest registered name the rest starts with; else all up to the first ":"."""
    start = f"{prefix}:{{"
    if not name.startswith(start):
        return None
    queue, sep, rest = name[len(start):].partition("}:limit:")
    kind, _sep, rest = rest.partition(":")
    if not sep or not QUEUE_NAME.match(queue) or kind not in keys.LIMIT_KINDS or not rest:
        return None
    names = [task.name for task in registry
             if rest == task.name or rest.startswith(task.name + ":")]
    if names:
        task_name = max(names, key=len)
        return kind, queue, task_name, rest[len(task_name) + 1:]
    task_name, _sep, key = rest.partition(":")
    return kind, queue, task_name, key


def declared(kind: str, task_name: str) -> tuple[str, int | None]:
    """The limit as shown and, for a rate, its window in ms (None: a concurrency limit)."""
    task = registry.find(task_name)
    options = task.options if task is not None else None
    if kind == "concurrency":
        shown = f"{options.concurrency_limit} at once" if options and options.concurrency_limit \
            else "?"
        return shown, None
    if options is None or options.rate_limit is None:
        return "?", UNKNOWN_WINDOW_MS
    return options.rate_limit, parse_rate(options.rate_limit).window_ms


def scan_limits(store: Limits, at: Position) -> tuple[list[LimitRow], Position | None]:
    """At most PAGE_SIZE limit keys from `at` on (at most MAX_SCAN_CALLS SCANs), read in
    one pipelined round trip; the position of the next page, or None."""
    found, following, _calls = scan_keys_page(get_store().locks, at,
                                              keys.limit_pattern(store.prefix), PAGE_SIZE)
    return read_limits(store, found), following


def read_limits(store: Limits, names: list[str]) -> list[LimitRow]:
    """The rows of these limit keys (others left out), sorted by task and key."""
    parsed = [(name, found) for name in dict.fromkeys(names)
              if (found := parse_limit_key(store.prefix, name)) is not None]
    shown = [declared(kind, task_name) for _name, (kind, _q, task_name, _k) in parsed]
    states = store.inspect_many([(name, window or 0) for (name, _), (_, window)
                                 in zip(parsed, shown, strict=True)], clock.now_ms())
    rows = [LimitRow(kind, queue, task_name, key, limit, state.used, state.holders,
                     state.waiting)
            for (_, (kind, queue, task_name, key)), (limit, _), state
            in zip(parsed, shown, states, strict=True)]
    rows.sort(key=lambda row: (row.task_name, row.kind, row.key))
    return rows


class LimitAdmin(RedisPageAdmin):
    """No database table: the limits read from Redis."""

    title = "Limits"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        at = Position.parse(request.GET.get("at"))
        try:
            rows, following = scan_limits(get_store().limits, at)
        except REDIS_ERROR as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        return self.render(request, "change_list.html", {
            "rows": rows, "first_page": str(at) == "0.0.0",
            "next_query": urlencode({"at": str(following)}) if following else "",
        })
