"""The admin's "Workflows" pages: the workflows (chains, groups) newest first with their
progress, one workflow's page with its members (each linking to its task's page), and a
Cancel action. Read from Redis through the unmanaged `Workflow` model.

The list reads one page of the workflows' index from a cursor (dispatch time and id);
the members one page of the workflow's member list, with their records' status in the
same round trip. Opening a page takes the "view" permission of `Workflow`; cancelling
takes "cancel": a POST (with CSRF), answered by a confirmation page, then
`cancel_workflow(id)` on "yes".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, reverse
from django.utils.http import urlencode

from django_taskrunner.admin.shared import RedisPageAdmin, page_path
from django_taskrunner.core.workflows import (
    WorkflowRecord,
    cancel_workflow,
    lookup_workflow,
    record_from,
    store,
)
from django_taskrunner.store.errors import REDIS_DOWN

PAGE = 50
MEMBERS_PAGE = 100
CANCEL_PERMISSION = "django_taskrunner.cancel_workflow"


@dataclass(frozen=True)
class MemberRow:
    """One member of a workflow's page: its index, stage, id and record."""

    index: int
    stage: int
    task_id: str
    status: str
    task_name: str
    queue: str
    url: str


def _cursor(raw: str) -> tuple[int, str] | None:
    score, _, workflow_id = raw.partition("-")
    if not score.isdigit() or not workflow_id.isalnum():
        return None
    return int(score), workflow_id


def _number(raw: str) -> int:
    return int(raw) if raw.isdigit() and len(raw) < 10 else 0


class WorkflowAdmin(RedisPageAdmin):
    """No database table: workflows read from Redis a page at a time."""

    title = "Workflows"

    def get_urls(self) -> list[URLPattern]:
        return [page_path(self, "", self.changelist_view, "changelist"),
                page_path(self, "detail/", self.detail_view, "detail"),
                page_path(self, "cancel/", self.cancel_view, "cancel")]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of workflows, newest first, from `?after=<dispatch ms>-<id>`."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        cursor = _cursor(request.GET.get("after", "")[:100])
        try:
            rows, next_cursor = self._page(cursor)
        except REDIS_DOWN as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        return self.render(request, "change_list.html", {
            "rows": rows, "detail_url": reverse(self.url_name("detail")),
            "next_query": urlencode({"after": next_cursor}) if next_cursor else "",
            "first_query": "?" if cursor else "",
        })

    def _page(self, cursor: tuple[int, str] | None) -> tuple[list[WorkflowRecord], str]:
        workflows = store()
        # Ties (one dispatch time) come in reverse id order: skip those shown already.
        found = workflows.page(None if cursor is None else cursor[0], PAGE + 20)
        if cursor is not None:
            found = [(wid, score) for wid, score in found
                     if score < cursor[0] or wid < cursor[1]]
        found = found[:PAGE + 1]
        more = len(found) > PAGE
        found = found[:PAGE]
        loaded = workflows.load_many([wid for wid, _ in found])
        workflows.forget([wid for (wid, _), fields in zip(found, loaded, strict=True)
                          if fields is None])
        rows = [record_from(wid, fields) for (wid, _), fields in zip(found, loaded, strict=True)
                if fields is not None]
        last = found[-1] if found else None
        return rows, f"{last[1]}-{last[0]}" if more and last else ""

    def detail_view(self, request: HttpRequest) -> HttpResponse:
        """One workflow, `?id=`, with one page of its members from `?start=`."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        workflow_id = request.GET.get("id", "")[:64]
        start = _number(request.GET.get("start", ""))
        try:
            record = lookup_workflow(workflow_id, with_task_ids=False)
            if record is None:
                raise Http404("no such workflow")
            members = self._members(request, record, start)
        except REDIS_DOWN as exc:
            return self.render(request, "detail.html", {"redis_error": str(exc)})
        base = f"{reverse(self.url_name('detail'))}?"
        end = start + len(members)
        return self.render(request, "detail.html", {
            "title": f"Workflow {record.id}", "record": record, "members": members,
            "first": start + 1, "last": end,
            "next_url": base + urlencode({"id": record.id, "start": end})
            if end < record.total else "",
            "previous_url": base + urlencode({"id": record.id,
                                              "start": max(0, start - MEMBERS_PAGE)})
            if start else "",
            "changelist_url": reverse(self.url_name("changelist")),
            "can_cancel": not record.finished and request.user.has_perm(CANCEL_PERMISSION),
            "cancel_url": reverse(self.url_name("cancel")),
        })

    def _members(self, request: HttpRequest, record: WorkflowRecord, start: int
                 ) -> list[MemberRow]:
        workflows = store()
        ids = workflows.members(record.id, start, start + MEMBERS_PAGE - 1)
        fields = workflows.record_fields(ids, ("s", "t", "q"))
        task_page = ""
        if request.user.has_perm("django_taskrunner.view_task"):
            task_page = reverse(f"{self.admin_site.name}:django_taskrunner_task_detail")
        stages, offset = [], 0
        for stage, size in enumerate(record.stage_sizes):
            stages += [stage] * size
            offset += size
        rows = []
        for index, (task_id, (status, name, queue)) in enumerate(
                zip(ids, fields, strict=True), start=start):
            url = (f"{task_page}?{urlencode({'queue': queue, 'id': task_id})}"
                   if task_page and queue else "")
            rows.append(MemberRow(index, stages[index] if index < len(stages) else 0, task_id,
                                  status or "expired", name or "", queue or "", url))
        return rows

    def cancel_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: confirm, then cancel one workflow."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(CANCEL_PERMISSION):
            raise PermissionDenied
        workflow_id = request.POST.get("id", "")[:64]
        back = f"{reverse(self.url_name('detail'))}?{urlencode({'id': workflow_id})}"
        try:
            record = lookup_workflow(workflow_id, with_task_ids=False)
            if record is None:
                raise Http404("no such workflow")
            if request.POST.get("confirm") != "yes":
                return self.render(request, "cancel_confirm.html", {
                    "title": f"Cancel workflow {record.id}?", "record": record,
                    "back_url": back, "cancel_url": reverse(self.url_name("cancel"))})
            done = cancel_workflow(record.id)
        except REDIS_DOWN as exc:
            return self.render(request, "detail.html", {"redis_error": str(exc)})
        if done:
            self.message_user(request, f"Cancelled workflow {record.id}.", messages.SUCCESS)
        else:
            self.message_user(request, f"Workflow {record.id} had finished already; nothing "
                                       f"was cancelled.", messages.WARNING)
        return HttpResponseRedirect(back)
