"""Admin for the transactional outbox: the rows waiting to be moved to Redis (read-only,
oldest first) and a "Flush now" action (POST, confirmed, its own permission). The
outbox's line on the queues dashboard is the dashboard's (`queues.py`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from django_taskrunner.admin.shared import age, page_path
from django_taskrunner.core import outbox
from django_taskrunner.models import OutboxMessage
from django_taskrunner.store.errors import REDIS_ERROR

# Batches one "Flush now" moves at most (100 rows each), so the request stays short;
# the leader's flusher moves the rest.
FLUSH_BATCHES = 50


class OutboxMessageAdmin(admin.ModelAdmin):
    """The rows only; nothing can be added or edited here."""

    list_display = ("message_id", "task_name", "queue", "created_at", "waiting", "attempts",
                    "short_error")
    list_filter = ("task_name", "queue")
    search_fields = ("message_id", "task_name")
    ordering = ("pk",)
    fields = ("message_id", "task_name", "queue", "shard", "created_at", "attempts",
              "last_error", "lock_ttl_ms", "body")
    readonly_fields = fields
    actions = None
    change_list_template = "admin/django_taskrunner/outboxmessage/change_list.html"
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_flush_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_taskrunner.flush_outboxmessage")

    @admin.display(description="waiting")
    def waiting(self, obj: OutboxMessage) -> str:
        return age(max(0.0, (timezone.now() - obj.created_at).total_seconds()))

    @admin.display(description="last error")
    def short_error(self, obj: OutboxMessage) -> str:
        text = obj.last_error
        return text if len(text) <= 120 else text[:117] + "..."

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        context = {"can_flush": self.has_flush_permission(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_urls(self) -> list[Any]:
        return [page_path(self, "flush/", self.flush_view, "flush"), *super().get_urls()]

    def flush_view(self, request: HttpRequest) -> HttpResponse:
        """Ask first; on the confirming POST move what waits (up to FLUSH_BATCHES)."""
        if not self.has_flush_permission(request):
            raise PermissionDenied
        back = reverse(f"{self.admin_site.name}:django_taskrunner_outboxmessage_changelist")
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            try:
                moved = outbox.flush_all(max_batches=FLUSH_BATCHES)
            except REDIS_ERROR as exc:
                self.message_user(request, f"Nothing was moved: Redis cannot be reached "
                                  f"({exc}). The rows wait.", messages.ERROR)
            else:
                self.message_user(request, f"Moved {moved} outbox row(s) to Redis.",
                                  messages.SUCCESS)
            return HttpResponseRedirect(back)
        return TemplateResponse(request, "admin/django_taskrunner/outboxmessage/flush_confirm.html",
                                {**self.admin_site.each_context(request), "opts": self.model._meta,
                                 "title": "Flush the outbox?", "back_url": back,
                                 "count": OutboxMessage.objects.count()})
