"""The admin's "Delayed tasks" page: the Redis-held delayed sets, through the unmanaged
`DelayedTask` model (the approach of django-rq's queue pages).

Listing needs the "view" permission, "Run now" and "Cancel" their own permissions.
Actions are POST only (CSRF-checked by the admin), and each asks for confirmation
first. Every value shown goes through the template's autoescaping.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode

from django_taskrunner.admin import delayed_sets as delayed
from django_taskrunner.admin.base import RedisPageAdmin
from django_taskrunner.checks import QUEUE_NAME
from django_taskrunner.conf import get_settings
from django_taskrunner.models import DelayedTask
from django_taskrunner.stats.health import dashboard_queues
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.errors import REDIS_ERROR

PER_PAGE = 50
MAX_SELECTED = 500
ACTIONS = {
    "run": ("django_taskrunner.run_delayedtask", "Run now"),
    "cancel": ("django_taskrunner.cancel_delayedtask", "Cancel"),
}


@admin.register(DelayedTask)
class DelayedTaskAdmin(RedisPageAdmin):
    """No database table: a list read from Redis, with run-now and cancel actions."""

    title = "Delayed tasks"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path("", self.admin_site.admin_view(self.changelist_view),
                 name="{}_{}_changelist".format(*info)),
            path("action/", self.admin_site.admin_view(self.action_view),
                 name="{}_{}_action".format(*info)),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of one queue's delayed set, or the matches of a task-name search."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        broker = get_broker()
        try:
            queues = delayed.queues_with_counts(
                broker, dashboard_queues(broker))
        except REDIS_ERROR as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        queue = self._chosen_queue(request.GET.get("queue", ""), queues)
        query = request.GET.get("q", "").strip()[:200]
        entries: Any = (delayed.search(broker, queue, query) if query
                        else delayed.DelayedSet(broker, queue))
        page = Paginator(entries, PER_PAGE).get_page(request.GET.get("p"))
        allowed = [(name, label) for name, (perm, label) in ACTIONS.items()
                   if request.user.has_perm(perm)]
        return self.render(request, "change_list.html", {
            "queues": queues, "queue": queue, "query": query, "page_obj": page,
            "actions": allowed, "search_limit": delayed.SEARCH_LIMIT,
            "action_url": reverse(f"{self.admin_site.name}:django_taskrunner_delayedtask_action"),
            "page_query": urlencode({"queue": queue, "q": query}),
        })

    def action_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: confirm, then run now or cancel the selected entries."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = request.POST.get("action", "")
        if action not in ACTIONS:
            return HttpResponseBadRequest("unknown action")
        if not request.user.has_perm(ACTIONS[action][0]):
            raise PermissionDenied
        queue = request.POST.get("queue", "")
        refs = [ref for ref in request.POST.getlist("selected") if delayed.parse_ref(ref)]
        if not QUEUE_NAME.match(queue) or len(refs) > MAX_SELECTED:
            return HttpResponseBadRequest("bad queue name or too many entries selected")
        back = self._changelist_url(queue)
        if not refs:
            self.message_user(request, "Select at least one delayed task.", messages.WARNING)
            return HttpResponseRedirect(back)
        broker = get_broker()
        if request.POST.get("confirm") != "yes":
            found = [entry for ref in refs if (entry := delayed.find(broker, queue, ref))]
            return self.render(request, "confirm.html", {
                "action": action, "action_label": ACTIONS[action][1], "queue": queue,
                "entries": found, "missing": len(refs) - len(found), "back_url": back,
                "action_url": reverse(
                    f"{self.admin_site.name}:django_taskrunner_delayedtask_action"),
            })
        done = sum(1 for ref in refs if delayed.take(broker, queue, ref, run=action == "run"))
        verb = "Moved to the queue" if action == "run" else "Cancelled"
        self.message_user(request, f"{verb}: {done} delayed task(s).", messages.SUCCESS)
        if done < len(refs):
            self.message_user(request, f"{len(refs) - done} were no longer waiting (already "
                                       f"run or cancelled).", messages.WARNING)
        return HttpResponseRedirect(back)

    def _chosen_queue(self, asked: str, queues: list[tuple[str, int]]) -> str:
        names = [name for name, _ in queues]
        if asked in names:
            return asked
        busy = [name for name, count in queues if count]
        return busy[0] if busy else (names[0] if names else get_settings().DEFAULT_QUEUE)

    def _changelist_url(self, queue: str) -> str:
        url = reverse(f"{self.admin_site.name}:django_taskrunner_delayedtask_changelist")
        return f"{url}?{urlencode({'queue': queue})}"
