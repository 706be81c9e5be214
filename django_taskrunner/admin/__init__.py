"""The admin's pages, one module each, all registered here and nowhere else.

Each page is a ModelAdmin of one model; the views a page adds (actions, JSON for its
refresh) come from its own `get_urls`, built with `shared.page_path`. Pages that show
Redis-held data use an unmanaged model with no table (`shared.RedisPageAdmin`).
"""

from __future__ import annotations

from django.contrib import admin

from django_taskrunner.admin.delayed import DelayedTaskAdmin
from django_taskrunner.admin.failed import FailedTaskAdmin
from django_taskrunner.admin.limits import LimitAdmin
from django_taskrunner.admin.locks import UniqueLockAdmin
from django_taskrunner.admin.outbox import OutboxMessageAdmin
from django_taskrunner.admin.periodic import PeriodicTaskAdmin
from django_taskrunner.admin.queues import QueueAdmin
from django_taskrunner.admin.tasks import TaskAdmin
from django_taskrunner.admin.workers import WorkerAdmin
from django_taskrunner.admin.workflows import WorkflowAdmin
from django_taskrunner.models import (
    DelayedTask,
    FailedTask,
    Limit,
    OutboxMessage,
    PeriodicTask,
    Queue,
    Task,
    UniqueLock,
    Worker,
    Workflow,
)

PAGES: tuple[tuple[type, type[admin.ModelAdmin]], ...] = (
    (DelayedTask, DelayedTaskAdmin),
    (Limit, LimitAdmin),
    (UniqueLock, UniqueLockAdmin),
    (OutboxMessage, OutboxMessageAdmin),
    (Queue, QueueAdmin),
    (Task, TaskAdmin),
    (Worker, WorkerAdmin),
    (Workflow, WorkflowAdmin),
    (FailedTask, FailedTaskAdmin),
    (PeriodicTask, PeriodicTaskAdmin),
)

for _model, _page in PAGES:
    admin.site.register(_model, _page)
