"""The Workflows pages: a list with each workflow's progress (paged through Redis), a
workflow's page with its members linking to their task pages, and Cancel (POST with
CSRF, the `cancel_workflow` permission, a confirmation first)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from django_taskrunner import chain, group, lookup_workflow
from django_taskrunner.models import Workflow
from tests.django.admin_helpers import logged_in, make_user, page_module
from tests.testapp.workflow_tasks import wf_blocked, wf_collect, wf_member

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/django_taskrunner/workflow/"
DETAIL = "/admin/django_taskrunner/workflow/detail/"
CANCEL = "/admin/django_taskrunner/workflow/cancel/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def test_the_list_shows_each_workflow_with_its_progress(root):
    done = group(wf_member.s({"n": 1}), wf_member.s({"n": 2}), then=wf_collect.s({})).dispatch()
    call_command("runtasks", "--burst")
    waiting = chain(wf_member.s({"n": 3}), wf_blocked.s({})).dispatch()

    html = root.get(LIST).content.decode()

    assert f"?id={done.id}" in html and f"?id={waiting.id}" in html
    assert html.index(waiting.id) < html.index(done.id)  # newest first
    assert 'tr-status-succeeded">succeeded' in html
    assert 'tr-status-running">running' in html
    assert "group(wf_member x2) -&gt; wf_collect" in html


def test_the_list_pages_through_redis(root, monkeypatch):
    monkeypatch.setattr(page_module(Workflow), "PAGE", 2)
    handles = [wf_member.s({"n": n}).dispatch() for n in range(5)]
    seen, query = [], ""
    for _ in range(5):
        response = root.get(LIST + query)
        ids = [h.id for h in handles if f"?id={h.id}" in response.content.decode()]
        seen += ids
        nxt = response.context["next_query"]
        if not nxt:
            break
        query = "?" + nxt
    assert sorted(seen) == sorted(h.id for h in handles)
    assert len(seen) == 5


def test_the_detail_page_links_each_member_to_its_task_page(root):
    handle = group(wf_member.s({"n": 1}), then=wf_collect.s({})).dispatch()
    call_command("runtasks", "--burst")

    html = root.get(DETAIL, {"id": handle.id}).content.decode()

    for task_id in handle.task_ids:
        assert f"/admin/django_taskrunner/task/detail/?queue=default&amp;id={task_id}" in html
    assert "tests.testapp.workflow_tasks.wf_collect" in html
    assert "Cancel this workflow" not in html  # finished
    member = root.get("/admin/django_taskrunner/task/detail/",
                      {"queue": "default", "id": handle.task_ids[0]})
    assert member.status_code == 200


def test_unknown_or_crafted_ids_answer_404(root):
    assert root.get(DETAIL, {"id": "nope"}).status_code == 404
    assert root.get(DETAIL, {"id": "<script>"}).status_code == 404
    assert root.post(CANCEL, {"id": "nope"}).status_code == 404


def test_view_and_cancel_need_their_permissions():
    handle = chain(wf_member.s({"n": 1}), wf_blocked.s({})).dispatch()
    nobody = logged_in(make_user("nobody"))
    assert nobody.get(LIST).status_code == 403
    viewer = logged_in(make_user("viewer", "view_workflow"))
    assert viewer.get(LIST).status_code == 200
    assert "Cancel this workflow" not in viewer.get(DETAIL, {"id": handle.id}).content.decode()
    assert viewer.post(CANCEL, {"id": handle.id, "confirm": "yes"}).status_code == 403
    assert lookup_workflow(handle.id).status == "running"


def test_cancel_asks_first_then_cancels_with_csrf():
    handle = chain(wf_member.s({"n": 1}), wf_blocked.s({})).dispatch()
    client = logged_in(make_user("canceller", "view_workflow", "cancel_workflow"),
                       enforce_csrf_checks=True)
    assert "Cancel this workflow" in client.get(DETAIL, {"id": handle.id}).content.decode()
    assert client.post(CANCEL, {"id": handle.id, "confirm": "yes"}).status_code == 403  # CSRF
    assert client.get(CANCEL).status_code == 405

    client = logged_in(make_user("canceller2", "view_workflow", "cancel_workflow"))
    confirm = client.post(CANCEL, {"id": handle.id})
    assert b"are you sure?" in confirm.content
    assert lookup_workflow(handle.id).status == "running"
    done = client.post(CANCEL, {"id": handle.id, "confirm": "yes"})
    assert done.status_code == 302
    assert lookup_workflow(handle.id).status == "cancelled"
