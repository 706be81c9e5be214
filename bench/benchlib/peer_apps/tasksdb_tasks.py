"""django-tasks' database backend (`django-tasks-db`): the ORM job as a Tasks-framework
task, enqueued as a row of the backend's table and run by `manage.py db_worker`, which
calls `close_old_connections()` before and after each task itself."""

from __future__ import annotations

from typing import Any

from benchlib.orm_job import orm_job

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task()
def orm(payload: dict[str, Any]) -> None:
    orm_job(payload)
