"""The admin's Workers page: one row per worker process, from the heartbeats the workers
write (`store/stats.py`).

Each row: the consumer name, host and pid, the queues it consumes, its pool (threads now,
and the autoscaling bounds), how many threads run a task, the tasks running there (links
to their pages), how long ago its last heartbeat was, and since when it runs. A worker
whose heartbeat hash expired (killed, crashed, cut off from Redis) is marked *lost* and
stays listed for `WORKERS_KEPT_MS` after its last heartbeat; a worker that stops cleanly
leaves the list at once. Opening it needs the "view" permission of `Worker`.

Reads: two pipelined round trips per page of `PAGE` workers, whatever their number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from django_taskrunner.admin.shared import RedisPageAdmin, age
from django_taskrunner.core import clock
from django_taskrunner.store import get_store
from django_taskrunner.store.stats import WorkerEntry

PAGE = 100


def _clock_time(epoch_ms: int) -> str:
    """A moment for people, with seconds, in the site's time zone."""
    moment = timezone.localtime(datetime.fromtimestamp(epoch_ms / 1000, tz=UTC))
    return f"{moment:%Y-%m-%d %H:%M:%S}"


def _number(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


@dataclass(frozen=True)
class RunningTask:
    task_id: str
    name: str
    queue: str
    ran_for: str
    url: str


@dataclass(frozen=True)
class WorkerRow:
    """One worker as the page shows it."""

    name: str
    state: str  # live | lost | unreadable
    host: str = ""
    pid: str = ""
    queues: tuple[str, ...] = ()
    threads: str = ""
    busy: str = ""
    seen: str = ""
    seen_at: str = ""
    started: str = ""
    running: tuple[RunningTask, ...] = field(default_factory=tuple)


def running_tasks(raw: str, now_ms: int, task_page: str) -> tuple[RunningTask, ...]:
    """The heartbeat's `running` field; nothing for what does not parse."""
    try:
        items = json.loads(raw or "[]")
    except ValueError:
        return ()
    found = []
    for item in items if isinstance(items, list) else ():
        if not (isinstance(item, list) and len(item) == 4 and all(
                isinstance(part, str) for part in item[:3]) and isinstance(item[3], int)):
            continue
        task_id, name, queue, started = item
        url = (f"{task_page}?{urlencode({'queue': queue, 'id': task_id})}" if task_page
               else "")
        found.append(RunningTask(task_id, name, queue, age(max(0, now_ms - started) / 1000),
                                 url))
    return tuple(found)


def worker_row(entry: WorkerEntry, now_ms: int, task_page: str) -> WorkerRow:
    seen = age(max(0, now_ms - entry.seen_ms) / 1000) + " ago"
    seen_at = _clock_time(entry.seen_ms)
    if entry.unreadable:
        return WorkerRow(entry.name, "unreadable", seen=seen, seen_at=seen_at)
    if entry.fields is None:
        return WorkerRow(entry.name, "lost", seen=seen, seen_at=seen_at)
    fields = entry.fields
    threads = fields.get("threads", "")
    bounds = [part for part in (fields.get("min", ""), fields.get("max", "")) if part]
    if len(bounds) == 2 and bounds[0] != bounds[1]:
        threads = f"{threads} ({bounds[0]}–{bounds[1]})"
    if fields.get("processes"):
        threads = f"{fields['processes']} × {threads}"
    started = _number(fields.get("started"))
    return WorkerRow(
        entry.name, "live", host=fields.get("host", ""), pid=fields.get("pid", ""),
        queues=tuple(q for q in fields.get("queues", "").split(",") if q), threads=threads,
        busy=fields.get("busy", ""), seen=seen, seen_at=seen_at,
        started=_clock_time(started) if started else "",
        running=running_tasks(fields.get("running", ""), now_ms, task_page))


class WorkerAdmin(RedisPageAdmin):
    """No database table: the worker processes, read from Redis at each visit."""

    title = "Workers"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        start = _number(request.GET.get("start", "")[:9]) or 0
        entries, total = get_store().workers.page(start, PAGE)
        task_page = ""
        if request.user.has_perm("django_taskrunner.view_task"):
            task_page = reverse(f"{self.admin_site.name}:django_taskrunner_task_detail")
        now_ms = clock.now_ms()
        rows = [worker_row(entry, now_ms, task_page) for entry in entries]
        end = start + len(rows)
        return self.render(request, "change_list.html", {
            "rows": rows, "total": total, "first": start + 1, "last": end,
            "live": sum(row.state == "live" for row in rows),
            "next_query": urlencode({"start": end}) if end < total else "",
            "previous_query": urlencode({"start": max(0, start - PAGE)}) if start else "",
        })
