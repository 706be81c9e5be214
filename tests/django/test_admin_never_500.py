"""Every admin page answers with Redis down or a key of the wrong type: a banner or a row
marked unreadable, never a 500. The pages are collected from the admin's own URL
patterns, so a page added later is covered without touching this file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from django_taskrunner import TaskRunnerError, dispatch, lookup_workflow
from django_taskrunner.models import FailedTask, OutboxMessage, PeriodicTask
from django_taskrunner.store import keys
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db
APP = "django_taskrunner"
CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")
QUERY = "?queue=default&id=t1&stream=1-0&status=running"
BANNER = ("Redis cannot be reached", "Redis answered with an error", "unreadable")


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def rows() -> dict[str, str]:
    """A row of each database-backed page, so its change and history pages open."""
    failed = FailedTask.objects.create(
        task_name="tests.testapp.tasks.noop", queue="default", message_id="m-1",
        payload=json.dumps({"n": 1}), error="ValueError: no", attempts=1,
        failed_at=timezone.now())
    periodic = PeriodicTask.objects.create(name="p", task_name="tests.testapp.tasks.noop",
                                           interval=60)
    outbox = OutboxMessage.objects.create(message_id="o-1", task_name="tests.testapp.tasks.noop",
                                          queue="default", body="{}",
                                          created_at=timezone.now())
    return {"failedtask": str(failed.pk), "periodictask": str(periodic.pk),
            "outboxmessage": str(outbox.pk)}


def admin_urls(pks: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(name, address) of every GET-able view of the app's admin pages, with and without
    the query a detail page reads."""
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != APP:
            continue
        base = f"/admin/{APP}/{model._meta.model_name}/"
        for pattern in model_admin.get_urls():
            route = CONVERTER.sub(pks.get(model._meta.model_name, "1"), str(pattern.pattern))
            name = pattern.name or f"{model._meta.model_name} {route}"
            yield name, base + route
            yield name, base + route + QUERY


def open_every_page(root: Client) -> list[tuple[str, int, str]]:
    """Open each page; (name, status, body) of each. A 500 raises (the test client
    re-raises the view's exception), failing the test with its traceback."""
    seen = []
    for name, url in admin_urls(rows()):
        response = root.get(url)
        seen.append((name, response.status_code, response.content.decode(errors="replace")))
    return seen


def check_pages(seen: list[tuple[str, int, str]]) -> None:
    for name, status, body in seen:
        if name.endswith("_live"):  # the JSON a page polls: 503 with the error
            assert status == 503 or status in (200, 404), (name, status)
            continue
        assert status in (200, 302, 403, 404, 405), (name, status)
        if name.endswith(("_changelist", "_detail")) and status == 200 and "redis" in name:
            assert any(text in body for text in BANNER), name


def test_every_page_answers_with_redis_down(root, taskrunner_settings):
    taskrunner_settings(REDIS_URL="redis://127.0.0.1:1/0", CONNECT_TIMEOUT=0.2,
                        SOCKET_TIMEOUT=0.5)
    seen = open_every_page(root)
    assert len(seen) > 40
    redis_pages = [(name, body) for name, status, body in seen
                   if status == 200 and name.endswith(("_changelist", "_detail"))
                   and not name.startswith(f"{APP}_failedtask")
                   and not name.startswith(f"{APP}_periodictask")
                   and not name.startswith(f"{APP}_outboxmessage")]
    assert redis_pages
    for name, body in redis_pages:
        assert "Redis cannot be reached" in body, name
    check_pages(seen)


def wrong_type_keys(prefix: str, task_id: str, workflow_id: str) -> list[str]:
    """A key of each kind the admin reads, named as the app names it."""
    queue = "default"
    return [
        keys.record_key(prefix, task_id), keys.record_key(prefix, "t1"),
        keys.workflow_key(prefix, workflow_id), keys.workflow_members_key(prefix, workflow_id),
        keys.workflow_index_key(prefix),
        keys.unique_key(prefix, queue, "tests.testapp.tasks.noop", "k"),
        keys.limit_key(prefix, queue, "rate", "tests.testapp.tasks.noop", "k"),
        keys.limit_key(prefix, queue, "concurrency", "tests.testapp.tasks.noop", "k"),
        keys.delayed_key(prefix, queue), keys.stats_key(prefix, queue),
        keys.window_key(prefix, queue), keys.queue_workers_key(prefix, queue),
        keys.worker_key(prefix, "w-1"), keys.finished_key(prefix, queue),
        keys.known_queues_key(prefix), keys.queues_seen_key(prefix),
        keys.leader_key(prefix, "default"), keys.paused_queues_key(prefix),
        keys.workers_key(prefix),
    ]


@pytest.mark.parametrize("kind", range(19))
def test_every_page_answers_with_a_key_of_the_wrong_type(root, r, prefix, kind):
    task_id = dispatch(noop, {"n": 1}).id
    workflow_id = "wf1"
    key = wrong_type_keys(prefix, task_id, workflow_id)[kind]
    r.delete(key)
    r.rpush(key, "not", "what", "you", "expect")  # a list where anything else is kept
    if r.type(key) == b"list" and "members" in key:
        r.delete(key)
        r.set(key, "a string where a list is kept")
    check_pages(open_every_page(root))


def test_lookup_workflow_of_a_key_of_the_wrong_type_raises_a_clear_error(r, prefix):
    r.rpush(keys.workflow_key(prefix, "wf1"), "x")
    with pytest.raises(TaskRunnerError, match="wf1"):
        lookup_workflow("wf1")
