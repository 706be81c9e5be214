"""The task page lists a task's durable steps with their results and times, escaped."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from tests.django.admin_helpers import logged_in
from tests.testapp.step_tasks import html_step, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

DETAIL = "/admin/django_taskrunner/task/detail/"


@pytest.fixture
def root():
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def test_the_task_page_lists_the_steps_in_the_order_they_were_kept(root):
    message = three_steps.dispatch({"n": 1, "fail": True})
    call_command("runtasks", "--burst")

    html = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()

    assert "<h2>Steps</h2>" in html
    assert html.index("a-of-1") < html.index("b-of-1") < html.index("c-of-1")
    assert html.count("tr-step-result") == 3


def test_a_step_result_is_escaped(root):
    message = html_step.dispatch({})
    call_command("runtasks", "--burst")

    html = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()

    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html


def test_a_task_without_steps_shows_no_steps_section(root):
    from tests.testapp.tasks import noop

    message = noop.dispatch({"n": 1})
    call_command("runtasks", "--burst")

    html = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()

    assert "<h2>Steps</h2>" not in html
