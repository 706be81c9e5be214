"""The admin's queues dashboard: is each queue keeping up?

Per queue: length, lag, pending, consumers with idle times, per-task run times,
throughput, predicted wait, how long messages waited before a worker picked them up
(mean, p95 and histogram), failures in the last hour and a chart of the last hour; and
the consumer group's leader. The figures come from `health.py`, the same as
`manage.py taskrunner_stats`. The page only reads: it has no action. Opening it needs
the "view" permission of `Queue`.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.http import urlencode

from django_taskrunner.admin import live, outbox, purge
from django_taskrunner.admin.base import RedisPageAdmin
from django_taskrunner.admin.chart import throughput_chart
from django_taskrunner.models import Queue
from django_taskrunner.stats import health
from django_taskrunner.stats.figures import QueueStats
from django_taskrunner.stats.recorder import PICKUP_BUCKETS, PICKUP_LABELS
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.errors import REDIS_ERROR


def seconds(value: float | None) -> str:
    """A duration for people: ms below a second, "–" when unknown."""
    if value is None:
        return "–"
    if value == 0:
        return "0 s"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 120:
        return f"{value:.2f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 120:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def pickup_buckets(stats: QueueStats) -> list[tuple[str, int]]:
    """("≤ 10.0 ms", count) for each pickup-delay bucket that holds any message."""
    rows = []
    for label, count in zip(PICKUP_LABELS, stats.pickup_buckets, strict=True):
        if count:
            bound = f"> {seconds(PICKUP_BUCKETS[-1])}" if label == "+Inf" else (
                f"≤ {seconds(float(label))}")
            rows.append((bound, count))
    return rows


@admin.register(Queue)
class QueueAdmin(RedisPageAdmin):
    """No database table: the dashboard, read from Redis at each visit."""

    title = "Queues"

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view
        return [path("", view(self.changelist_view), name="{}_{}_changelist".format(*info)),
                # The purge action and the JSON the dashboard polls: admin/purge.py, live.py
                path("purge/", view(partial(purge.purge_view, self)),
                     name="{}_{}_purge".format(*info)),
                path("live/", view(partial(live.queues_json_view, self)),
                     name="{}_{}_live".format(*info))]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """Every known queue (or `?queue=<name>` only), and the leader."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        in_outbox = outbox.dashboard_context(request, self.admin_site.name)  # Redis down too
        try:
            broker = get_broker()
            names = health.dashboard_queues(broker)
            chosen = request.GET.get("queue", "")
            shown = [chosen] if chosen in names else names
            leader = health.get_leader(broker)
            queues = [health.get_health(name, broker=broker) for name in shown]
        except REDIS_ERROR as exc:
            return self.render(request, "dashboard.html", {"redis_error": str(exc), **in_outbox})
        failed_url = self._failed_url(request)
        return self.render(request, "dashboard.html", {
            "leader": leader, "leader_left": seconds(leader.lease_left),
            "queue_names": names, "chosen": chosen if chosen in names else "",
            "queues": [self._view_of(item, failed_url) for item in queues],
            **in_outbox,
        })

    def _view_of(self, item: health.QueueHealth, failed_url: str | None) -> dict[str, Any]:
        stats = item.stats
        return {
            "name": item.queue, "health": item, "stats": stats,
            "average": seconds(stats.average), "p95": seconds(stats.p95),
            "wait": seconds(stats.predicted_wait), "oldest_wait": seconds(stats.oldest_wait),
            "pickup_average": seconds(stats.pickup_average),
            "pickup_p95": seconds(stats.pickup_p95),
            "pickup_buckets": pickup_buckets(stats),
            "tasks": [(task, seconds(task.average), seconds(task.p95),
                       seconds(task.pickup_average)) for task in stats.tasks],
            "consumers": [(c, seconds(c.idle)) for c in item.consumers],
            "hidden_consumers": item.consumer_count - len(item.consumers),
            "chart": throughput_chart(item.minutes),
            "failed_url": f"{failed_url}&{urlencode({'queue': item.queue})}" if failed_url
            else None,
        }

    def _failed_url(self, request: HttpRequest) -> str | None:
        """The failed-task list filtered to the last hour, for those who may open it."""
        if not request.user.has_perm("django_taskrunner.view_failedtask"):
            return None
        since = (timezone.now() - timedelta(hours=1)).replace(microsecond=0)
        url = reverse(f"{self.admin_site.name}:django_taskrunner_failedtask_changelist")
        return f"{url}?{urlencode({'failed_at__gte': since.isoformat()})}"

