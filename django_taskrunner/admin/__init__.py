"""Admin registrations; each page lives in its own module."""

from __future__ import annotations

from django.contrib import admin

from django_taskrunner.admin import (
    delayed,  # noqa: F401 - registers the delayed-tasks page
    limits,  # noqa: F401 - registers the limits page
    locks,  # noqa: F401 - registers the unique-locks page
    outbox,  # noqa: F401 - registers the outbox rows
    queues,  # noqa: F401 - registers the queues dashboard
    tasks,  # noqa: F401 - registers the tasks pages
    workflows,  # noqa: F401 - registers the workflows pages
)
from django_taskrunner.admin.failed import FailedTaskAdmin
from django_taskrunner.admin.periodic import PeriodicTaskAdmin
from django_taskrunner.models import FailedTask, PeriodicTask

admin.site.register(FailedTask, FailedTaskAdmin)
admin.site.register(PeriodicTask, PeriodicTaskAdmin)
