"""The queues dashboard's Pause and Resume buttons: POST with CSRF, the `pause_queue`
permission, and the paused queue shown as such."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner import dispatch, paused_queues
from tests.django.admin_helpers import logged_in, make_user
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db
DASHBOARD = "/admin/django_taskrunner/queue/"
PAUSE = "/admin/django_taskrunner/queue/pause/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", "root@example.com", "pw"))


def test_pause_then_resume_from_the_dashboard(root):
    dispatch(noop, {"n": 1})
    assert "Pause queue" in root.get(DASHBOARD).content.decode()
    response = root.post(PAUSE, {"queue": "default", "action": "pause"}, follow=True)
    page = response.content.decode()
    assert "Paused queue default" in page
    assert 'class="tr-paused"' in page and "Resume queue" in page
    assert set(paused_queues()) == {"default"}
    root.post(PAUSE, {"queue": "default", "action": "resume"})
    assert paused_queues() == {}
    assert 'class="tr-paused"' not in root.get(DASHBOARD).content.decode()


def test_pausing_needs_its_permission_a_post_and_the_csrf_token():
    dispatch(noop, {"n": 1})
    viewer = logged_in(make_user("viewer", "view_queue"))
    assert "Pause queue" not in viewer.get(DASHBOARD).content.decode()
    assert viewer.post(PAUSE, {"queue": "default", "action": "pause"}).status_code == 403
    pauser = make_user("pauser", "view_queue", "pause_queue")
    assert logged_in(pauser).get(PAUSE).status_code == 405
    strict = logged_in(pauser, enforce_csrf_checks=True)
    assert strict.post(PAUSE, {"queue": "default", "action": "pause"}).status_code == 403
    assert paused_queues() == {}
    assert logged_in(pauser).post(PAUSE, {"queue": "nope", "action": "pause"}).status_code == 404
    assert logged_in(pauser).post(PAUSE, {"queue": "default", "action": "pause"}
                                  ).status_code == 302
    assert set(paused_queues()) == {"default"}


def test_taskrunner_stats_marks_a_paused_queue():
    import io
    import json

    from django.core.management import call_command

    from django_taskrunner import pause_queue

    dispatch(noop, {"n": 1})
    pause_queue("default")
    out = io.StringIO()
    call_command("taskrunner_stats", "-Q", "default", stdout=out)
    assert "default (paused)" in out.getvalue()
    out = io.StringIO()
    call_command("taskrunner_stats", "-Q", "default", "--json", stdout=out)
    assert json.loads(out.getvalue())[0]["paused"] is True
