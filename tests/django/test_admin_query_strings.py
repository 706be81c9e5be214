"""No admin page of the app answers 500 for an odd query string (a hand-edited address)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from django_taskrunner.models import FailedTask

pytestmark = pytest.mark.django_db

PAGES = ["failedtask/", "failedtask/retry-matching/", "failedtask/1/retry/", "delayedtask/",
         "delayedtask/action/", "uniquelock/", "uniquelock/release/", "queue/", "periodictask/"]
QUERIES = ["p=abc", "p=-1", "p=99999", "o=zzz", "o=1.2.abc", "confirm=yes", "next=/x",
           "queue=nope", "queue=a%00b", "q=%00", "at=abc", "at=1:2:3", "at=%ff%fe", "e=1",
           "all=", "queue=", "task_name__in=a,b", "failed_at__gte=zz", "_popup=1",
           "q=" + "x" * 5000]


@pytest.mark.parametrize("page", PAGES)
def test_odd_query_strings_never_answer_500(r, page):
    FailedTask.objects.create(id=1, task_name="t", queue="default", message_id="m",
                              payload="{}", failed_at=timezone.now())
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    errors = [(method, query, response.status_code)
              for query in QUERIES for method in ("get", "post")
              for response in [getattr(client, method)(f"/admin/django_taskrunner/{page}?{query}")]
              if response.status_code >= 500]
    assert errors == []
