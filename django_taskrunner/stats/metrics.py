"""Prometheus exposition of the site's task figures (needs the `prometheus` extra).

Every figure comes from Redis (`stats.get_stats`), so any process of the site shows the
same, site-wide values: scrape one endpoint, not one per worker. Two ways to serve it:

- `metrics_view`, a Django view you add to your URLs. It answers staff users, and
  scrapers that send `Authorization: Bearer <METRICS_TOKEN>`; everyone else gets 403.
- `runtasks --metrics-port 9108` (`serve_metrics`): a small HTTP server in the worker,
  bound to 127.0.0.1 unless `--metrics-addr` says otherwise. No authentication: keep it
  on a private network.
"""

from __future__ import annotations

import hmac
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from django_taskrunner.conf import get_settings
from django_taskrunner.core import outbox_rows
from django_taskrunner.stats.figures import QueueStats, TaskStats, dashboard_queues, get_stats
from django_taskrunner.stats.recorder import BUCKET_LABELS, PICKUP_LABELS
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN

INSTALL_HINT = 'install the "prometheus" extra: pip install "django-taskrunner[prometheus]"'


def _prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core
        import prometheus_client.exposition
    except ImportError:
        raise ImproperlyConfigured(f"prometheus_client is not installed; {INSTALL_HINT}") from None
    return prometheus_client


def leader_available() -> bool:
    """Leader figures need leader election (`django_taskrunner.scheduling.election`)."""
    return importlib.util.find_spec("django_taskrunner.scheduling.election") is not None


class TaskrunnerCollector:
    """A prometheus_client collector that reads the figures of `queues` at each scrape."""

    def __init__(self, queues: Callable[[], list[str]] = dashboard_queues) -> None:
        # Every queue a worker consumes, a dispatch used or a task names, and DEFAULT_QUEUE.
        self.queues = queues

    def describe(self) -> list[Any]:
        return []  # figures are read at scrape time only

    def collect(self) -> Iterator[Any]:
        core = _prometheus().core
        figures = [get_stats(queue) for queue in self.queues()]
        yield from _queue_metrics(core, figures)
        yield _pickup_metric(core, figures)
        yield from _task_metrics(core, figures)
        if leader_available():
            yield _leader_metric(core)
        yield from _outbox_metrics(core)


def _queue_metrics(core: Any, figures: list[QueueStats]) -> Iterator[Any]:
    gauges = [
        ("taskrunner_queue_length", "Messages not finished (waiting + pending).", "length"),
        ("taskrunner_queue_lag", "Messages not yet delivered to any worker.", "waiting"),
        ("taskrunner_queue_pending", "Messages delivered to a worker and not acknowledged.",
         "pending"),
        ("taskrunner_queue_lag_seconds", "Age of the oldest message not yet delivered.",
         "oldest_wait"),
        ("taskrunner_queue_predicted_wait_seconds",
         "Predicted wait of a task dispatched now: length x average run time / threads.",
         "predicted_wait"),
        ("taskrunner_queue_throughput", "Tasks finished per second over the last minute.",
         "throughput"),
        ("taskrunner_workers", "Live worker processes consuming the queue.", "workers"),
        ("taskrunner_worker_threads", "Pool threads of those workers.", "threads"),
        ("taskrunner_worker_busy_threads", "Of those threads, how many run a task.", "busy"),
    ]
    for name, doc, attribute in gauges:
        family = core.GaugeMetricFamily(name, doc, labels=["queue"])
        for stats in figures:
            value = getattr(stats, attribute)
            if value is not None:  # unknown (no run time measured yet): left out
                family.add_metric([stats.queue], float(value))
        yield family


def _pickup_metric(core: Any, figures: list[QueueStats]) -> Any:
    """How long messages waited before a worker started them (first deliveries)."""
    histogram = core.HistogramMetricFamily(
        "taskrunner_queue_pickup_delay_seconds",
        "Wait of messages before a worker started them: from dispatch (or the move of a due "
        "delayed task or retry onto the stream) to the start, first deliveries only.",
        labels=["queue"])
    for stats in figures:
        if stats.pickup_buckets:
            total_seconds = (stats.pickup_average or 0.0) * stats.pickups
            histogram.add_metric([stats.queue], _cumulative_counts(
                PICKUP_LABELS, stats.pickup_buckets), total_seconds)
    return histogram


def _task_metrics(core: Any, figures: list[QueueStats]) -> Iterator[Any]:
    counters = [
        ("taskrunner_tasks_run", "Attempts run.", "runs"),
        ("taskrunner_tasks_succeeded", "Tasks that succeeded.", "succeeded"),
        ("taskrunner_tasks_failed", "Tasks failed for good (or refused before running).",
         "failed"),
        ("taskrunner_tasks_retried", "Attempts that failed and were retried.", "retried"),
    ]
    pairs = [(stats.queue, task) for stats in figures for task in stats.tasks]
    for name, doc, attribute in counters:
        family = core.CounterMetricFamily(name, doc, labels=["queue", "task"])
        for queue, task in pairs:
            family.add_metric([queue, task.name], float(getattr(task, attribute)))
        yield family
    histogram = core.HistogramMetricFamily(
        "taskrunner_task_run_seconds", "Run time of attempts.", labels=["queue", "task"])
    for queue, task in pairs:
        histogram.add_metric([queue, task.name], _cumulative(task), task.run_seconds)
    yield histogram


def _cumulative(task: TaskStats) -> list[tuple[str, float]]:
    return _cumulative_counts(BUCKET_LABELS, task.buckets)


def _cumulative_counts(labels: tuple[str, ...], counts: tuple[int, ...]
                       ) -> list[tuple[str, float]]:
    total, buckets = 0, []
    for label, count in zip(labels, counts, strict=True):
        total += count
        buckets.append((label, float(total)))
    return buckets


def _leader_metric(core: Any) -> Any:
    settings = get_settings()
    holder = get_store().inspect.leader_holder()
    family = core.GaugeMetricFamily(
        "taskrunner_leader", "1 while a worker holds the group's leader lease (holder label).",
        labels=["group", "holder"])
    family.add_metric([settings.CONSUMER_GROUP, holder or ""], 1.0 if holder else 0.0)
    return family


def _outbox_metrics(core: Any) -> Iterator[Any]:
    """The transactional outbox's size and the age of its oldest row (from the database;
    left out when it cannot be read)."""
    try:
        figures = outbox_rows.figures()
    except DatabaseError:
        return
    size = core.GaugeMetricFamily("taskrunner_outbox_size",
                                  "Tasks committed to the outbox and not yet moved to Redis.")
    size.add_metric([], float(figures.count))
    yield size
    oldest = core.GaugeMetricFamily("taskrunner_outbox_oldest_seconds",
                                    "Age of the oldest outbox row (0 when it is empty).")
    oldest.add_metric([], figures.oldest_age)
    yield oldest


def registry() -> Any:
    """A CollectorRegistry holding only our collector."""
    prometheus = _prometheus()
    result = prometheus.CollectorRegistry(auto_describe=False)
    result.register(TaskrunnerCollector())
    return result


def render(accept: str = "") -> tuple[bytes, str]:
    """(body, content type) of the exposition, in the format `accept` asks for."""
    encoder, content_type = _prometheus().exposition.choose_encoder(accept)
    return encoder(registry()), content_type


def _may_read(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token = get_settings().METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics, for staff users and bearers of METRICS_TOKEN."""
    if not _may_read(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    try:
        body, content_type = render(request.headers.get("Accept", ""))
    except REDIS_DOWN as exc:
        return HttpResponse(f"Redis is unreachable: {exc}\n", status=503,
                            content_type="text/plain")
    return HttpResponse(body, content_type=content_type)


def serve_metrics(port: int, addr: str = "127.0.0.1") -> Callable[[], None]:
    """Serve the exposition over HTTP in a daemon thread; returns the function to stop it."""
    server, thread = _prometheus().start_http_server(port, addr, registry=registry())

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
