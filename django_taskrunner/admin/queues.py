"""The admin's queues dashboard: is each queue keeping up? With its purge action and the
JSON it polls to refresh itself.

Per queue: length, lag, pending, consumers with idle times, per-task run times,
throughput, predicted wait, how long messages waited before a worker picked them up
(mean, p95 and histogram), failures in the last hour and a chart of the last hour; and
the consumer group's leader. The figures come from `stats/figures.py`, the same as
`manage.py taskrunner_stats`. Opening it needs the "view" permission of `Queue`.

The "last hour" chart is drawn as inline SVG by the template: no JavaScript, nothing
loaded from elsewhere. One bar per minute: its height is the tasks that finished in that
minute, the failed ones stacked in red on top of the succeeded ones. The scale is the
busiest minute.

Pausing a queue (`pause/`, POST with CSRF, the `pause_queue` permission of `Queue`):
`pause_queue`/`resume_queue` (docs/flow-control.md); a paused queue is marked so in the
summary row and its section, with the time it was paused.

The figures as JSON (`live/`) are polled every few seconds by
`static/django_taskrunner/refresh.js`, so the dashboard refreshes without a reload: the
same figures as the page, read with the same "view" permission; it changes nothing.

Purging a queue (`purge/`): its waiting messages and its delayed entries go, running
ones stay, and the unique locks and task ids the purged messages held are freed (they
will never run, so their locks must not block new dispatches). Batches of `BATCH`:
Python reads a batch and works out what each message holds, then one script per batch
removes those still waiting and frees their keys where they still hold their value
(`store/lua/purge_stream.lua`, `purge_delayed.lua`). The walk stops at what was there
when the purge began, so a purge ends while dispatches go on. The action takes the
`purge_task` permission of `Task`, POST with CSRF, and asks first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import URLPattern, reverse
from django.utils import timezone
from django.utils.http import urlencode

from django_taskrunner.admin.delayed import delayed_counts
from django_taskrunner.admin.shared import (
    RedisPageAdmin,
    age,
    decode_body,
    page_path,
    stream_names,
    valid_stream,
)
from django_taskrunner.conf import get_settings
from django_taskrunner.core import outbox_rows, sharding
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.pauses import pause_queue, paused_queues, resume_queue
from django_taskrunner.exceptions import InvalidTaskPayload, UnreadableData
from django_taskrunner.stats.figures import (
    MinuteCounts,
    QueueHealth,
    QueueStats,
    dashboard_queues,
    get_health,
    get_leader,
)
from django_taskrunner.stats.recorder import PICKUP_BUCKETS, PICKUP_LABELS
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR, REPLY_ERROR
from django_taskrunner.store.fair import FairKey
from django_taskrunner.store.inspect import (
    PurgeItem,
    Release,
    StreamBrowser,
    stream_id_key,
)

PURGE_PERMISSION = "django_taskrunner.purge_task"
PAUSE_PERMISSION = "django_taskrunner.pause_queue"
BATCH = 500
WIDTH = 600
HEIGHT = 140
TOP = 22  # room for the scale label (16 px text)
BOTTOM = 22  # room for the time labels

# Keys shown per fair queue on the dashboard: those with the most waiting tasks.
FAIR_TOP = 10


def busiest_fair_keys(broker: Any, queue: str) -> list[FairKey]:
    """A fair queue's keys with the most tasks waiting for their turn; none when its fair
    keys hold something else (written by hand): the rest of the page still shows."""
    try:
        return broker.store.fair.top_keys_of_queue(
            sharding.shards(queue), FAIR_TOP)
    except REPLY_ERROR:
        return []


def shown_seconds(value: float | None) -> str:
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


def clock_time(epoch_ms: int) -> str:
    """A moment for people, with seconds, in the site's time zone."""
    moment = timezone.localtime(datetime.fromtimestamp(epoch_ms / 1000, tz=UTC))
    return f"{moment:%Y-%m-%d %H:%M:%S}"


def paused_or_error() -> tuple[dict[str, int], str]:
    """The paused queues, or none and why when their key cannot be read."""
    try:
        return paused_queues(), ""
    except UnreadableData as exc:
        return {}, str(exc)


def pickup_buckets(stats: QueueStats) -> list[tuple[str, int]]:
    """("≤ 10.0 ms", count) for each pickup-delay bucket that holds any message."""
    rows = []
    for label, count in zip(PICKUP_LABELS, stats.pickup_buckets, strict=True):
        if count:
            bound = f"> {shown_seconds(PICKUP_BUCKETS[-1])}" if label == "+Inf" else (
                f"≤ {shown_seconds(float(label))}")
            rows.append((bound, count))
    return rows


def outbox_context(request: HttpRequest, site_name: str) -> dict[str, Any]:
    """The dashboard's outbox line: rows waiting, the oldest's age, the list's address
    (for those who may view it); read from the database, so shown with Redis down too."""
    try:
        figures = outbox_rows.figures()
    except DatabaseError as exc:
        return {"outbox_error": str(exc)}
    url = None
    if request.user.has_perm("django_taskrunner.view_outboxmessage"):
        url = reverse(f"{site_name}:django_taskrunner_outboxmessage_changelist")
    return {"outbox": figures, "outbox_age": age(figures.oldest_age), "outbox_url": url}


class QueueAdmin(RedisPageAdmin):
    """No database table: the dashboard, read from Redis at each visit."""

    title = "Queues"

    def get_urls(self) -> list[URLPattern]:
        return [page_path(self, "", self.changelist_view, "changelist"),
                page_path(self, "purge/", self.purge_view, "purge"),
                page_path(self, "live/", self.live_view, "live"),
                page_path(self, "pause/", self.pause_view, "pause")]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """Every known queue (or `?queue=<name>` only), and the leader."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        in_outbox = outbox_context(request, self.admin_site.name)  # Redis down too
        try:
            broker = get_store().streams
            names = dashboard_queues(broker)
            chosen = request.GET.get("queue", "")
            shown = [chosen] if chosen in names else names
            leader = get_leader(broker)
            queues = [get_health(name, broker=broker) for name in shown]
            delayed = {name: delayed_counts(broker, name) for name in shown}
            fair_keys = {name: busiest_fair_keys(broker, name) for name in shown}
            paused, paused_error = paused_or_error()
        except REDIS_ERROR as exc:
            return self.render(request, "dashboard.html", {"redis_error": str(exc), **in_outbox})
        failed_url = self._failed_url(request)
        return self.render(request, "dashboard.html", {
            "leader": leader, "leader_left": shown_seconds(leader.lease_left),
            "queue_names": names, "chosen": chosen if chosen in names else "",
            "queues": [{**self._view_of(item, failed_url, paused),
                        "delayed": delayed[item.queue],
                        "fair_keys": self._fair_rows(request, fair_keys[item.queue])}
                       for item in queues],
            "paused_error": paused_error, "stats_window": get_settings().STATS_WINDOW,
            "can_pause": request.user.has_perm(PAUSE_PERMISSION),
            **in_outbox,
        })

    def _view_of(self, item: QueueHealth, failed_url: str | None,
                 paused: dict[str, int]) -> dict[str, Any]:
        stats = item.stats
        since = paused.get(item.queue)
        return {
            "name": item.queue, "health": item, "stats": stats,
            "paused": since is not None, "paused_since": clock_time(since) if since else "",
            "average": shown_seconds(stats.average), "p95": shown_seconds(stats.p95),
            "wait": shown_seconds(stats.predicted_wait),
            "oldest_wait": shown_seconds(stats.oldest_wait),
            "pickup_average": shown_seconds(stats.pickup_average),
            "pickup_p95": shown_seconds(stats.pickup_p95),
            "pickup_buckets": pickup_buckets(stats),
            "tasks": [(task, shown_seconds(task.average), shown_seconds(task.p95),
                       shown_seconds(task.pickup_average)) for task in stats.tasks],
            "consumers": [(c, shown_seconds(c.idle)) for c in item.consumers],
            "hidden_consumers": item.consumer_count - len(item.consumers),
            "chart": throughput_chart(item.minutes),
            "failed_url": f"{failed_url}&{urlencode({'queue': item.queue})}" if failed_url
            else None,
        }

    def _fair_rows(self, request: HttpRequest, found: list[FairKey]
                   ) -> list[tuple[FairKey, str]]:
        """The keys with most tasks waiting for their turn, each with its Tasks list
        (none for the tasks without a key, or without the Task view permission)."""
        if not request.user.has_perm("django_taskrunner.view_task"):
            return [(item, "") for item in found]
        url = reverse(f"{self.admin_site.name}:django_taskrunner_task_changelist")
        return [(item, f"{url}?{urlencode({'queue': item.queue, 'fair_key': item.key})}"
                 if item.key else "") for item in found]

    def _failed_url(self, request: HttpRequest) -> str | None:
        """The failed-task list filtered to the last hour, for those who may open it."""
        if not request.user.has_perm("django_taskrunner.view_failedtask"):
            return None
        since = (timezone.now() - timedelta(hours=1)).replace(microsecond=0)
        url = reverse(f"{self.admin_site.name}:django_taskrunner_failedtask_changelist")
        return f"{url}?{urlencode({'failed_at__gte': since.isoformat()})}"

    def live_view(self, request: HttpRequest) -> JsonResponse:
        """{"queues": {name: figures}} for every queue of the dashboard (or `?queue=`)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            names = dashboard_queues()
            chosen = request.GET.get("queue", "")
            shown = [chosen] if chosen in names else names
            figures = {name: queue_figures(get_health(name)) for name in shown}
        except REDIS_DOWN as exc:
            return JsonResponse({"error": f"Redis cannot be reached: {exc}"}, status=503)
        return JsonResponse({"queues": figures})

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: pause (`action=pause`) or resume (`action=resume`) one queue."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(PAUSE_PERMISSION):
            raise PermissionDenied
        queue = request.POST.get("queue", "")
        action = request.POST.get("action", "")
        if action not in ("pause", "resume") or queue not in dashboard_queues():
            raise Http404("no such queue")
        back = f"{reverse(self.url_name('changelist'))}?{urlencode({'queue': queue})}"
        if action == "pause":
            changed = pause_queue(queue)
            text = (f"Paused queue {queue}: workers start no new task of it until it is "
                    f"resumed; running tasks go on." if changed
                    else f"Queue {queue} was paused already.")
        else:
            changed = resume_queue(queue)
            text = (f"Resumed queue {queue}." if changed
                    else f"Queue {queue} was not paused.")
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)
        return HttpResponseRedirect(back)

    def purge_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: show what a purge of `queue` removes, then purge on "yes"."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(PURGE_PERMISSION):
            raise PermissionDenied
        browser = get_store().browse
        queue = request.POST.get("queue", "")
        try:
            known = dashboard_queues()
        except REDIS_DOWN as exc:
            return self.render(request, "dashboard.html", {"redis_error": str(exc)})
        if queue not in known or not valid_stream(stream_names([queue])[0], known):
            raise Http404("no such queue")
        back = f"{reverse(self.url_name('changelist'))}?{urlencode({'queue': queue})}"
        try:
            if request.POST.get("confirm") != "yes":
                waiting, running, delayed = counts(browser, queue)
                return self.render(request, "purge_confirm.html", {
                    "title": f"Purge queue {queue}?", "queue": queue, "waiting": waiting,
                    "running": running, "delayed": delayed, "back_url": back,
                    "purge_url": reverse(self.url_name("purge")),
                })
            done = purge_queue(browser, queue)
        except REDIS_DOWN as exc:
            return self.render(request, "dashboard.html", {"redis_error": str(exc)})
        self.message_user(
            request, f"Purged queue {queue}: removed {done.waiting} waiting message(s) and "
                     f"{done.delayed} delayed task(s); their unique locks and task ids were "
                     f"freed. Running tasks were left alone.", messages.SUCCESS)
        return HttpResponseRedirect(back)


def queue_figures(item: QueueHealth) -> dict[str, object]:
    """The figures of one queue's summary row, by the `data-field` names of its cells."""
    stats = item.stats
    return {
        "length": stats.length, "lag": "n/a" if item.lag is None else item.lag,
        "pending": stats.pending, "workers": stats.workers,
        "threads": f"{stats.threads} ({stats.busy})",
        "throughput": f"{stats.throughput:.2f}", "failed": item.failed_last_hour,
    }


@dataclass(frozen=True)
class Bar:
    """One minute: where its two stacked rectangles go, and its tooltip."""

    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True)
class Chart:
    """What the template draws."""

    width: int
    height: int
    baseline: float
    bars: tuple[Bar, ...]
    peak: int  # finished tasks in the busiest minute
    start_label: str
    end_label: str
    finished: int
    failed: int

    @property
    def peak_label(self) -> str:
        return f"{self.peak}/min ({self.peak / 60:.2f} tasks/s)"


def _clock(start_ms: int) -> str:
    return f"{timezone.localtime(datetime.fromtimestamp(start_ms / 1000, tz=UTC)):%H:%M}"


def throughput_chart(minutes: Sequence[MinuteCounts], width: int = WIDTH,
                     height: int = HEIGHT) -> Chart:
    """Stacked bars of succeeded and failed tasks per minute, oldest on the left."""
    baseline = height - BOTTOM
    plot = baseline - TOP
    slot = width / max(1, len(minutes))
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    scale = plot / peak if peak else 0.0
    bars = []
    for index, minute in enumerate(minutes):
        done_height = minute.succeeded * scale
        failed_height = minute.failed * scale
        done_y = baseline - done_height
        finished = minute.succeeded + minute.failed
        bars.append(Bar(
            x=round(index * slot + 0.5, 2), width=round(max(1.0, slot - 1), 2),
            done_y=round(done_y, 2), done_height=round(done_height, 2),
            failed_y=round(done_y - failed_height, 2), failed_height=round(failed_height, 2),
            title=(f"{_clock(minute.start_ms)}: {minute.succeeded} succeeded, "
                   f"{minute.failed} failed, {minute.retried} retried "
                   f"({finished / 60:.2f} tasks/s)"),
        ))
    return Chart(
        width=width, height=height, baseline=baseline, bars=tuple(bars), peak=peak,
        start_label=_clock(minutes[0].start_ms) if minutes else "",
        end_label=_clock(minutes[-1].start_ms) if minutes else "",
        finished=sum(m.succeeded + m.failed for m in minutes),
        failed=sum(m.failed for m in minutes),
    )


@dataclass(frozen=True)
class PurgeCount:
    """What a purge removed."""

    waiting: int
    delayed: int


def releases(prefix: str, shard: str, message: TaskMessage | None) -> tuple[Release, ...]:
    """The keys a purged message frees: its lock (and mode record), its task_id."""
    if message is None:
        return ()
    holder = locks.holder_value(message)
    found: list[Release] = []
    if message.lock_key:
        try:
            message.check_lock_key(prefix, shard)
        except InvalidTaskPayload:
            pass  # names a key that is not a lock of this queue: never touched
        else:
            found += [Release(message.lock_key, holder),
                      Release(keys.unique_mode_key(prefix, shard, message.lock_key), "")]
    if message.has_task_id:
        found.append(Release(keys.task_id_key(prefix, shard, message.id), holder))
    return tuple(found)


def purge_waiting(browser: StreamBrowser, shard: str) -> int:
    """Delete the stream's waiting messages up to the newest one now; returns how many."""
    stop = browser.last_id(shard)
    if stop is None:
        return 0
    cursor = browser.group_state(shard).last_delivered
    removed = 0
    while True:
        entries = [entry for entry in browser.waiting_after(shard, cursor, BATCH)
                   if stream_id_key(entry.stream_id) <= stream_id_key(stop)]
        if not entries:
            return removed
        items = [PurgeItem(entry.stream_id,
                           releases(browser.prefix, shard, decode_body(entry.body)))
                 for entry in entries]
        removed += browser.purge_stream(shard, items)
        cursor = entries[-1].stream_id


def purge_delayed(browser: StreamBrowser, shard: str, count: int) -> int:
    """Remove the delayed set's members, `count` of them at most (the size it had)."""
    removed = 0
    for _round in range(math.ceil(count / BATCH) + 1):
        members = browser.delayed_batch(shard, BATCH)
        if not members:
            break
        items = [PurgeItem(body, releases(browser.prefix, shard, decode_body(body)))
                 for body in members]
        removed += browser.purge_delayed(shard, items)
    return removed


def purge_queue(browser: StreamBrowser, queue: str) -> PurgeCount:
    """Purge every shard of `queue`: waiting messages and delayed entries."""
    waiting = delayed = 0
    for shard in browser.streams(sharding.shards(queue)):  # and its priority levels
        waiting += purge_waiting(browser, shard)
        delayed += purge_delayed(browser, shard, browser.delayed_count(shard))
    fair = get_store().fair  # fair queues: tasks waiting for a turn
    waiting += sum(fair.purge_shard(shard) for shard in sharding.shards(queue))
    return PurgeCount(waiting, delayed)


def counts(browser: StreamBrowser, queue: str) -> tuple[int, int, int]:
    """(waiting, running, delayed) of a queue now, for the confirmation page."""
    waiting = running = delayed = 0
    for shard in browser.streams(sharding.shards(queue)):  # and its priority levels
        state = browser.group_state(shard)
        waiting += state.waiting
        running += state.pending
        delayed += browser.delayed_count(shard)
    fair = get_store().fair  # fair queues: tasks waiting for a turn
    waiting += sum(fair.count_shard(shard) for shard in sharding.shards(queue))
    return waiting, running, delayed
