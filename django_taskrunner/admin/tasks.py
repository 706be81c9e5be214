"""The admin's "Tasks" pages: queued, running, delayed and finished tasks of each queue,
and one task's page, read from Redis through the unmanaged `Task` model.

The list reads one page of one stream from a cursor (see `task_facts`), the finished
list one page of the queue's finished index and its records (see `finished`); the running list
refreshes itself every few seconds through `live/`, a JSON view polled by
`static/django_taskrunner/refresh.js`. Opening any of it takes the "view" permission of
`Task`; it changes nothing. Unknown ids, queues and streams answer 404.

The task page shows the task's record (status, result or error, progress, attempts,
times) and, to those with the "cancel" permission, a Cancel button: a POST (with CSRF)
answered by a confirmation page, then `cancel(id)` on "yes".
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode

from django_taskrunner.admin import finished
from django_taskrunner.admin import task_facts as facts_of
from django_taskrunner.admin import task_rows as rows_of
from django_taskrunner.admin.base import RedisPageAdmin
from django_taskrunner.core.records import cancel
from django_taskrunner.core.steps import shown as shown_steps
from django_taskrunner.models import Task
from django_taskrunner.stats.health import dashboard_queues
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.browse import get_browser
from django_taskrunner.store.errors import REDIS_DOWN

REFRESH_SECONDS = 5
CANCEL_PERMISSION = "django_taskrunner.cancel_task"


@admin.register(Task)
class TaskAdmin(RedisPageAdmin):
    """No database table: tasks read from Redis a page at a time."""

    title = "Tasks"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name=self._name("changelist")),
            path("detail/", view(self.detail_view), name=self._name("detail")),
            path("live/", view(self.live_view), name=self._name("live")),
            path("cancel/", view(self.cancel_view), name=self._name("cancel")),
        ]

    def _name(self, view: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{view}"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of one stream's queued or running tasks."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        browser = get_browser()
        try:
            queues = dashboard_queues()
            streams = facts_of.stream_names(queues, browser)
            stream = request.GET.get("queue", "") or (streams[0] if streams else "")
            if stream in queues and stream not in streams:  # a split queue: its first shard
                stream = sharding.shards(stream)[0]
            if not facts_of.valid_stream(stream, queues):
                raise Http404("no such queue")
            if (status := request.GET.get("status", "queued")) == "finished":
                return self._finished_view(request, stream, streams)
            status = status if status == "running" else "queued"
            query = request.GET.get("q", "").strip()[:200]
            page = self._page(browser, stream, status, query, request)
            state = browser.group_state(stream)
            delayed = browser.delayed_count(stream)
        except REDIS_DOWN as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        return self.render(request, "change_list.html", {
            "streams": streams, "queue": stream, "status": status, "query": query,
            "page": page, "state": state, "delayed": delayed,
            "delayed_url": self._delayed_url(request, keys.queue_of(stream)),
            **self._list_links(request, stream, status, query, page),
            "refresh_seconds": REFRESH_SECONDS, "search_scan": rows_of.SEARCH_SCAN,
            "detail_url": reverse(self.url_name("detail")),
        })

    def _list_links(self, request: HttpRequest, stream: str, status: str, query: str,
                    page: rows_of.RowPage) -> dict[str, str]:
        """The list's filter and paging query strings, and its live view's URL."""
        consumer = request.GET.get("consumer", "")[:200] if status == "running" else ""
        filters = {"queue": stream, "status": status, "q": query,
                   **({"consumer": consumer} if consumer else {})}
        live = (f"{reverse(self.url_name('live'))}?{urlencode({'queue': stream})}"
                if status == "running" and not (query or consumer or request.GET.get("after"))
                else "")
        return {
            "consumer": consumer, "filters": urlencode(filters),
            "next_query": urlencode({**filters, "after": page.next_cursor})
            if page.next_cursor else "",
            "previous_query": urlencode({**filters, "before": page.previous_cursor})
            if page.previous_cursor and status == "queued" else "",
            "first_query": urlencode(filters) if page.previous_cursor else "",
            "live_url": live,
        }

    def _finished_view(self, request: HttpRequest, stream: str, streams: list[str]
                       ) -> HttpResponse:
        """One page of the queue's finished tasks, newest first, read from their records
        (a split queue lists every shard's: the index is the queue's)."""
        queue = keys.queue_of(stream)
        outcome = finished.outcome_filter(request.GET.get("outcome", ""))
        try:
            page = finished.finished_page(queue, cursor=request.GET.get("after", ""),
                                          outcome=outcome)
            count = finished.finished_count(queue)
            state = get_browser().group_state(stream)
            delayed = get_browser().delayed_count(stream)
        except REDIS_DOWN as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        filters = {"queue": stream, "status": "finished",
                   **({"outcome": outcome} if outcome else {})}
        return self.render(request, "change_list.html", {
            "streams": streams, "queue": stream, "status": "finished", "finished": page,
            "finished_count": count, "outcome": outcome, "outcomes": finished.OUTCOMES,
            "state": state, "delayed": delayed, "finished_scan": finished.SCAN,
            "delayed_url": self._delayed_url(request, queue),
            "filters": urlencode(filters),
            "next_query": urlencode({**filters, "after": page.next_cursor})
            if page.next_cursor else "",
            "first_query": urlencode(filters) if request.GET.get("after") else "",
            "detail_url": reverse(self.url_name("detail")),
        })

    def _page(self, browser: Any, stream: str, status: str, query: str,
              request: HttpRequest) -> rows_of.RowPage:
        after = request.GET.get("after", "")
        before = request.GET.get("before", "")
        if status == "running":
            consumer = request.GET.get("consumer", "")[:200]
            return rows_of.running_page(browser, stream, after=after, query=query,
                                         consumer=consumer)
        if before and not facts_of.STREAM_ID.match(before) and before != "+":
            before = ""
        return rows_of.queued_page(browser, stream, after=after, before=before, query=query)

    def detail_view(self, request: HttpRequest) -> HttpResponse:
        """One task, by `?queue=&stream=<stream id>` or `?queue=&id=<message id>`."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        stream = request.GET.get("queue", "")
        stream_id = request.GET.get("stream", "")
        message_id = request.GET.get("id", "")[:255]
        hint = request.GET.get("from", "")
        browser = get_browser()
        try:
            facts = self._gather(browser, stream, stream_id, message_id, hint)
        except REDIS_DOWN as exc:
            return self.render(request, "detail.html", {"redis_error": str(exc)})
        if not facts.found:
            raise Http404("no such task in this queue")
        return self.render(request, "detail.html", {
            "title": f"Task {facts.message_id or facts.stream_id}", "facts": facts,
            "links": self._links(request, facts),
            "changelist_url": reverse(self.url_name("changelist")),
            "can_cancel": facts.cancellable and request.user.has_perm(CANCEL_PERMISSION),
            "cancel_url": reverse(self.url_name("cancel")),
            "steps": shown_steps(facts.record.steps) if facts.record else [],  # docs/steps.md
        })

    def cancel_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: confirm, then cancel one task of one queue (by its record)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(CANCEL_PERMISSION):
            raise PermissionDenied
        queue = request.POST.get("queue", "")
        message_id = request.POST.get("id", "")[:255]
        try:
            known = dashboard_queues()
            if not facts_of.valid_stream(queue, known) and queue not in known:
                raise Http404("no such queue")
            record = facts_of.record_in(message_id, queue) if message_id else None
            if record is None:
                raise Http404("no such task in this queue")
            back = (f"{reverse(self.url_name('detail'))}?"
                    f"{urlencode({'queue': queue, 'id': message_id})}")
            if request.POST.get("confirm") != "yes":
                return self.render(request, "cancel_confirm.html", {
                    "title": f"Cancel task {message_id}?", "record": record, "queue": queue,
                    "back_url": back, "cancel_url": reverse(self.url_name("cancel"))})
            done = cancel(message_id)
        except REDIS_DOWN as exc:
            return self.render(request, "detail.html", {"redis_error": str(exc)})
        if done:
            self.message_user(request, f"Cancelled task {message_id} ({record.task_name}).",
                              messages.SUCCESS)
        else:
            self.message_user(request, f"Task {message_id} had finished already; nothing "
                                       f"was cancelled.", messages.WARNING)
        return HttpResponseRedirect(back)

    def _gather(self, browser: Any, stream: str, stream_id: str, message_id: str,
                hint: str) -> facts_of.TaskFacts:
        """The facts from one stream; a split queue's name looks in each of its shards."""
        queues = dashboard_queues()
        if stream in queues and stream not in facts_of.stream_names(queues):
            candidates = browser.streams(sharding.shards(stream))
        elif facts_of.valid_stream(stream, queues):
            candidates = [stream]
        else:
            raise Http404("no such queue")
        if message_id and not stream_id and len(candidates) > 1:
            record = facts_of.record_in(message_id, candidates[0])  # its shard first
            if record is not None and record.shard in candidates:
                candidates = [record.shard, *(c for c in candidates if c != record.shard)]
        for shard in candidates:
            facts = facts_of.gather(browser, shard, stream_id=stream_id,
                                    message_id=message_id, hint=hint)
            if facts.found:
                return facts
        return facts

    def _links(self, request: HttpRequest, facts: facts_of.TaskFacts) -> dict[str, Any]:
        """Where the page links to, for those who may open it."""
        site = self.admin_site.name
        user = request.user
        queue = keys.queue_of(facts.queue)
        links: dict[str, Any] = {
            "queue": f"{reverse(self.url_name('changelist'))}?"
                     f"{urlencode({'queue': facts.queue, 'status': facts.status or 'queued'})}",
        }
        if user.has_perm("django_taskrunner.view_queue"):
            links["dashboard"] = (f"{reverse(f'{site}:django_taskrunner_queue_changelist')}?"
                                  f"{urlencode({'queue': queue})}")
        if user.has_perm("django_taskrunner.view_failedtask"):
            links["failed"] = [(row, reverse(f"{site}:django_taskrunner_failedtask_change",
                                             args=[row.pk])) for row in facts.failed_rows]
        search = facts_of.lock_search(facts.message, get_browser().prefix, facts.queue)
        if search and user.has_perm("django_taskrunner.view_uniquelock"):
            links["lock"] = (f"{reverse(f'{site}:django_taskrunner_uniquelock_changelist')}?"
                             f"{urlencode({'queue': facts.queue, 'q': search})}")
        if facts.status == "delayed":
            links["delayed"] = self._delayed_url(request, queue)
        return links

    def _delayed_url(self, request: HttpRequest, queue: str) -> str:
        if not request.user.has_perm("django_taskrunner.view_delayedtask"):
            return ""
        url = reverse(f"{self.admin_site.name}:django_taskrunner_delayedtask_changelist")
        return f"{url}?{urlencode({'queue': queue})}"

    def live_view(self, request: HttpRequest) -> JsonResponse:
        """The running tasks of one stream (first page), as JSON for refresh.js."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        stream = request.GET.get("queue", "")
        browser = get_browser()
        try:
            if not facts_of.valid_stream(stream, dashboard_queues()):
                raise Http404("no such queue")
            page = rows_of.running_page(browser, stream)
        except REDIS_DOWN as exc:
            return JsonResponse({"error": f"Redis cannot be reached: {exc}"}, status=503)
        detail = reverse(self.url_name("detail"))
        return JsonResponse({"rows": [
            {**rows_of.as_json_row(row),
             "url": f"{detail}?{urlencode({'queue': row.queue, 'stream': row.stream_id})}"}
            for row in page.rows], "more": bool(page.next_cursor)})
