"""Admin registrations; each page lives in its own module."""

from __future__ import annotations

from django.contrib import admin

from django_taskrunner import (
    delayed_admin,  # noqa: F401 - registers the delayed-tasks page
    locks_admin,  # noqa: F401 - registers the unique-locks page
    queues_admin,  # noqa: F401 - registers the queues dashboard
)
from django_taskrunner.failed_admin import FailedTaskAdmin
from django_taskrunner.models import FailedTask, PeriodicTask
from django_taskrunner.periodic_admin import PeriodicTaskAdmin

admin.site.register(FailedTask, FailedTaskAdmin)
admin.site.register(PeriodicTask, PeriodicTaskAdmin)
