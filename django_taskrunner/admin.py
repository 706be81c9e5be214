"""Admin registrations; each page lives in its own module."""

from __future__ import annotations

from django.contrib import admin

from django_taskrunner.failed_admin import FailedTaskAdmin
from django_taskrunner.models import FailedTask

admin.site.register(FailedTask, FailedTaskAdmin)
