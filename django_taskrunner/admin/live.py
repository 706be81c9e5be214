"""The queues dashboard's figures as JSON, polled every few seconds by
`static/django_taskrunner/refresh.js`, so the dashboard refreshes without a reload.

Staff with the "view" permission of `Queue` only (the dashboard's own); it reads the
same figures as the page (`stats/health.py`) and changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, JsonResponse

from django_taskrunner.stats import health
from django_taskrunner.store.errors import REDIS_DOWN

if TYPE_CHECKING:
    from django_taskrunner.admin.base import RedisPageAdmin


def queue_figures(item: health.QueueHealth) -> dict[str, object]:
    """The figures of one queue's summary row, by the `data-field` names of its cells."""
    stats = item.stats
    return {
        "length": stats.length, "lag": "n/a" if item.lag is None else item.lag,
        "pending": stats.pending, "workers": stats.workers,
        "threads": f"{stats.threads} ({stats.busy})",
        "throughput": f"{stats.throughput:.2f}", "failed": item.failed_last_hour,
    }


def queues_json_view(model_admin: RedisPageAdmin, request: HttpRequest) -> JsonResponse:
    """{"queues": {name: figures}} for every queue of the dashboard (or `?queue=`)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    try:
        names = health.dashboard_queues()
        chosen = request.GET.get("queue", "")
        shown = [chosen] if chosen in names else names
        figures = {name: queue_figures(health.get_health(name)) for name in shown}
    except REDIS_DOWN as exc:
        return JsonResponse({"error": f"Redis cannot be reached: {exc}"}, status=503)
    return JsonResponse({"queues": figures})
