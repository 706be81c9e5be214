"""Purging a queue from the queues dashboard: its waiting messages and its delayed
entries go, running ones stay, and the unique locks and task ids the purged messages
held are freed (they will never run, so their locks must not block new dispatches).

Batches of `BATCH`: Python reads a batch and works out what each message holds, then
one script per batch removes those still waiting and frees their keys where they still
hold their value (`store/lua/purge_stream.lua`, `purge_delayed.lua`). The walk stops at
what was there when the purge began, so a purge ends while dispatches go on.

The action takes the `purge_task` permission of `Task`, POST with CSRF, and asks first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import reverse
from django.utils.http import urlencode

from django_taskrunner.admin.task_facts import decode, stream_names, valid_stream
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.stats.health import dashboard_queues
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.browse import (
    PurgeItem,
    Release,
    StreamBrowser,
    get_browser,
    stream_id_key,
)
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.fair import Fair

if TYPE_CHECKING:
    from django_taskrunner.admin.base import RedisPageAdmin

PURGE_PERMISSION = "django_taskrunner.purge_task"
BATCH = 500


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
        items = [PurgeItem(entry.stream_id, releases(browser.prefix, shard, decode(entry.body)))
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
        items = [PurgeItem(body, releases(browser.prefix, shard, decode(body)))
                 for body in members]
        removed += browser.purge_delayed(shard, items)
    return removed


def purge_queue(browser: StreamBrowser, queue: str) -> PurgeCount:
    """Purge every shard of `queue`: waiting messages and delayed entries."""
    waiting = delayed = 0
    for shard in browser.streams(sharding.shards(queue)):  # and its priority levels
        waiting += purge_waiting(browser, shard)
        delayed += purge_delayed(browser, shard, browser.delayed_count(shard))
    fair = Fair(browser.client, browser.prefix)  # fair queues: tasks waiting for a turn
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
    fair = Fair(browser.client, browser.prefix)  # fair queues: tasks waiting for a turn
    waiting += sum(fair.count_shard(shard) for shard in sharding.shards(queue))
    return waiting, running, delayed


def purge_view(model_admin: RedisPageAdmin, request: HttpRequest) -> HttpResponse:
    """POST only: show what a purge of `queue` removes, then purge on "yes"."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not request.user.has_perm(PURGE_PERMISSION):
        raise PermissionDenied
    browser = get_browser()
    queue = request.POST.get("queue", "")
    try:
        known = dashboard_queues()
    except REDIS_DOWN as exc:
        return model_admin.render(request, "dashboard.html", {"redis_error": str(exc)})
    if queue not in known or not valid_stream(stream_names([queue])[0], known):
        raise Http404("no such queue")
    back = f"{reverse(model_admin.url_name('changelist'))}?{urlencode({'queue': queue})}"
    try:
        if request.POST.get("confirm") != "yes":
            waiting, running, delayed = counts(browser, queue)
            return model_admin.render(request, "purge_confirm.html", {
                "title": f"Purge queue {queue}?", "queue": queue, "waiting": waiting,
                "running": running, "delayed": delayed, "back_url": back,
                "purge_url": reverse(model_admin.url_name("purge")),
            })
        done = purge_queue(browser, queue)
    except REDIS_DOWN as exc:
        return model_admin.render(request, "dashboard.html", {"redis_error": str(exc)})
    model_admin.message_user(
        request, f"Purged queue {queue}: removed {done.waiting} waiting message(s) and "
                 f"{done.delayed} delayed task(s); their unique locks and task ids were "
                 f"freed. Running tasks were left alone.", messages.SUCCESS)
    return HttpResponseRedirect(back)
