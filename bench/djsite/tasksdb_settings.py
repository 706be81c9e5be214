"""bench/orm.py's site for django-tasks' database backend (`django-tasks-db`): the
benchmark site plus the backend's app and a `TASKS` setting naming it. Its queue is
the same PostgreSQL database the job writes its rows to, as a user of it would have."""

from importlib.util import find_spec

from djsite.settings import *  # noqa: F403

# Django 6 has the Tasks framework built in; Django 5.2 gets it from the django-tasks
# backport, whose app holds the framework's signals and checks.
INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]  # noqa: F405
if find_spec("django.tasks") is None:
    INSTALLED_APPS.insert(-1, "django_tasks")
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
