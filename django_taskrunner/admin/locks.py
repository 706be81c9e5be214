"""The admin's "Unique locks" page: every held unique lock, found with SCAN, with its
queue, task, key, holder, mode, conflict policy and time left, and a "Release" action.

Listing needs the "view" permission of `UniqueLock`, releasing "release_uniquelock".
A release is POST only (CSRF-checked), asks for confirmation first, and is value-guarded:
it frees a lock only while the holder shown on the page still holds it, so a lock a newer
task took meanwhile is never freed.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    QueryDict,
)
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode

from django_taskrunner.admin import held_locks as unique_locks
from django_taskrunner.admin.base import RedisPageAdmin
from django_taskrunner.checks import QUEUE_NAME
from django_taskrunner.core import unique as locks
from django_taskrunner.models import UniqueLock
from django_taskrunner.stats.health import dashboard_queues
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.errors import REDIS_ERROR
from django_taskrunner.store.locks import for_broker as lock_store

RELEASE_PERMISSION = "django_taskrunner.release_uniquelock"
MAX_SELECTED = 500
OUTCOMES = {
    "released": ("Released {n} lock(s).", messages.SUCCESS),
    "retaken": ("{n} lock(s) were left alone: a newer task holds them now.", messages.WARNING),
    "gone": ("{n} lock(s) had already been freed or had expired.", messages.WARNING),
}


def lock_ref(lock: unique_locks.HeldLock) -> str:
    """What a checkbox posts: the lock key and the value (holder) it was shown with."""
    return json.dumps([lock.key, lock.holder_value], ensure_ascii=False)


def parse_ref(ref: str) -> tuple[str, str] | None:
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


@admin.register(UniqueLock)
class UniqueLockAdmin(RedisPageAdmin):
    """No database table: the locks read from Redis, with a value-guarded release."""

    title = "Unique locks"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path("", self.admin_site.admin_view(self.changelist_view),
                 name="{}_{}_changelist".format(*info)),
            path("release/", self.admin_site.admin_view(self.release_view),
                 name="{}_{}_release".format(*info)),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of held locks, optionally of one queue or with a text in their key."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        queue = request.GET.get("queue", "")
        queue = queue if QUEUE_NAME.match(queue) else ""
        text = request.GET.get("q", "").strip()[:200]
        at = unique_locks.Position.parse(request.GET.get("at"))
        broker = get_broker()
        try:
            page = unique_locks.scan_locks(lock_store(broker), at, queue=queue, text=text)
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
        parsed = [found for ref in refs if (found := parse_ref(ref))]
        if len(parsed) != len(refs) or len(refs) > MAX_SELECTED:
            return HttpResponseBadRequest("malformed or too many locks selected")
        back_query = _filters_query(request.POST.get("back", ""))
        back = f"{reverse(self.url_name('changelist'))}?{back_query}"
        if not parsed:
            self.message_user(request, "Select at least one lock.", messages.WARNING)
            return HttpResponseRedirect(back)
        broker = get_broker()
        if any(unique_locks.parse_key(broker.prefix, key) is None for key, _ in parsed):
            return HttpResponseBadRequest("not a unique lock of this site")
        if request.POST.get("confirm") != "yes":
            return self._confirm(request, parsed, back, back_query)
        counts = {outcome: 0 for outcome in OUTCOMES}
        for key, holder in parsed:
            counts[unique_locks.release(lock_store(broker), key, holder)] += 1
        for outcome, count in counts.items():
            if count:
                text, level = OUTCOMES[outcome]
                self.message_user(request, text.format(n=count), level)
        return HttpResponseRedirect(back)

    def _confirm(self, request: HttpRequest, parsed: list[tuple[str, str]], back: str,
                 back_query: str) -> HttpResponse:
        broker = get_broker()
        now = {lock.key: lock for lock in unique_locks.read_locks(
            lock_store(broker), [key for key, _ in parsed])}
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
