"""The admin's "Delayed tasks" page: the Redis-held delayed sets, through the unmanaged
`DelayedTask` model (the approach of django-rq's queue pages), with "Run now" and
"Cancel" actions.

Listing needs the "view" permission, "Run now" and "Cancel" their own permissions.
Actions are POST only (CSRF-checked by the admin), and each asks for confirmation
first. Every value shown goes through the template's autoescaping.

Nothing here loads a whole set: a page is one ZRANGE by index, a search walks the set
with ZSCAN and keeps at most `SEARCH_LIMIT` matches, and an action finds its entry by
due time (ZRANGEBYSCORE on one score) and message id inside one script.

A queue split into shards has one delayed set per shard; every function here shows the
queue as one: counts add up, a page merges the shards' first entries by due time, and an
action looks for its entry in each shard.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, reverse
from django.utils.http import urlencode

from django_taskrunner.admin.shared import RedisPageAdmin, page_path
from django_taskrunner.admin.timeline import moment
from django_taskrunner.conf import QUEUE_NAME, get_settings
from django_taskrunner.core import sharding
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import MAX_EPOCH_MS, TaskMessage
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.stats.figures import dashboard_queues
from django_taskrunner.store import connection, get_store
from django_taskrunner.store.errors import REDIS_ERROR
from django_taskrunner.store.streams import Broker

logger = logging.getLogger(__name__)

SEARCH_LIMIT = 1000
PAYLOAD_PREVIEW = 2000  # characters of payload JSON shown per entry
# An entry reference as the admin posts it: "<due ms>:<message id>".
REF = re.compile(r"^(-?\d{1,17}):([^\s:]{1,255})$")
PER_PAGE = 50
MAX_SELECTED = 500
ACTIONS = {
    "run": ("django_taskrunner.run_delayedtask", "Run now"),
    "cancel": ("django_taskrunner.cancel_delayedtask", "Cancel"),
}


@dataclass(frozen=True)
class DelayedEntry:
    """One waiting message as the admin shows it."""

    queue: str
    due_ms: int
    body: str
    message: TaskMessage | None  # None when the body does not decode
    wait: str = ""  # waiting on a rate or concurrency limit: which (its record's `lw`)

    @property
    def ref(self) -> str:
        return f"{self.due_ms}:{self.message.id if self.message else ''}"

    @property
    def due(self) -> datetime:
        return datetime.fromtimestamp(self.due_ms / 1000, tz=UTC)

    @property
    def due_display(self) -> str:
        """The due time in the console's one format (`moment`), to the millisecond."""
        return moment(self.due, ms=True)

    @property
    def task_name(self) -> str:
        return self.message.task_name if self.message else "(undecodable message)"

    @property
    def attempt(self) -> int | None:
        return self.message.attempt if self.message else None

    @property
    def payload_preview(self) -> str:
        if self.message is None:
            text = self.body
        else:
            text = json.dumps(self.message.payload, indent=2, ensure_ascii=False, sort_keys=True)
        return text if len(text) <= PAYLOAD_PREVIEW else text[:PAYLOAD_PREVIEW] + "\n..."


def _entry(queue: str, body: bytes | str, score: float) -> DelayedEntry:
    """An entry to show; one that is not a usable message is shown as undecodable."""
    shown = connection.text(body, errors="replace")
    try:
        message: TaskMessage | None = TaskMessage.from_json(body)
    except InvalidTaskPayload:
        message = None
    return DelayedEntry(queue=queue, due_ms=_score_ms(score), body=shown, message=message)


def with_limit_waits(broker: Broker, entries: list[DelayedEntry]) -> list[DelayedEntry]:
    """The entries, those waiting on a rate or concurrency limit marked so: their record
    says "delayed" until this due time, with the limit in `lw` (one round trip)."""
    known = [entry for entry in entries if entry.message is not None]
    rows = broker.store.workflows.record_fields(
        [entry.message.id for entry in known if entry.message], ("s", "lw", "due"))
    waits = {id(entry): lw for entry, (status, lw, due) in zip(known, rows, strict=True)
             if status == "delayed" and lw and due == str(entry.due_ms)}
    return [replace(entry, wait=waits[id(entry)]) if id(entry) in waits else entry
            for entry in entries]


# Delayed entries (the first ones by due time, of each delayed set of a queue) whose
# records a count of the tasks waiting on a limit reads, at most: one round trip each.
COUNT_SCAN = 1000


@dataclass(frozen=True)
class DelayedCounts:
    """A queue's delayed set(s): how many entries, and how many of them wait on a rate
    or concurrency limit (the rest are scheduled: a delayed dispatch, a retry's backoff).
    The dashboard and the Tasks page both show these, so they agree."""

    total: int
    on_limit: int
    exact: bool  # False: only the first COUNT_SCAN entries of a set were looked at

    @property
    def scheduled(self) -> int:
        return self.total - self.on_limit

    @property
    def on_limit_text(self) -> str:
        return f"{self.on_limit}" if self.exact else f"{self.on_limit}+"


def delayed_counts(broker: Broker, queue: str) -> DelayedCounts:
    """The counts of `queue`'s delayed tasks: ZCARD of each set, then the records of its
    first COUNT_SCAN entries (those waiting on a limit are due soon: they come first)."""
    store = broker.store.schedule
    shards = delayed_sets_of(broker, queue)
    sizes = store.count_delayed(shards)
    heads = store.delayed_heads([s for s, n in zip(shards, sizes, strict=True) if n],
                                COUNT_SCAN)
    entries = [_entry(queue, body, score) for rows in heads for body, score in rows]
    on_limit = sum(1 for entry in with_limit_waits(broker, entries) if entry.wait)
    return DelayedCounts(sum(sizes), on_limit, exact=sum(sizes) == len(entries))


def _score_ms(score: float) -> int:
    """A due time to show from a score; a score no dispatch writes (inf, 1e300) is clamped
    to the range a datetime can show, so it cannot break the page."""
    if math.isnan(score):
        return 0
    return int(min(max(score, 0), MAX_EPOCH_MS))


def delayed_sets_of(broker: Broker, queue: str) -> list[str]:
    """The delayed sets of `queue`: each shard's own, and its priority levels in use."""
    found = broker.levels_in_use(sharding.shards(queue))
    return [stream for streams in found.values() for stream in streams]


class DelayedSet:
    """A sequence view of one queue's delayed set(s), ordered by due time (for Paginator)."""

    def __init__(self, broker: Broker, queue: str) -> None:
        self.broker = broker
        self.store = broker.store.schedule
        self.queue = queue
        self.shards = delayed_sets_of(broker, queue)

    def count(self) -> int:
        return sum(self.store.count_delayed(self.shards))

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, index: slice) -> list[DelayedEntry]:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("DelayedSet supports plain slices only")
        start = index.start or 0
        stop = index.stop if index.stop is not None else start + 100
        if stop <= start:
            return []
        if len(self.shards) == 1:
            rows = self.store.delayed_range(self.shards[0], start, stop - 1)
        else:  # the first `stop` of the merged order are among each shard's first `stop`
            heads = self.store.delayed_heads(self.shards, stop)
            merged = heapq.merge(*heads, key=lambda row: (row[1], row[0]))
            rows = list(itertools.islice(merged, start, stop))
        return [_entry(self.queue, body, score) for body, score in rows]


def _glob_escape(text: str) -> str:
    """A case-insensitive glob matching `text` literally."""
    out = []
    for ch in text:
        if ch.isalpha() and ch.lower() != ch.upper():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        elif ch in "*?[]\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def search(broker: Broker, queue: str, text: str, limit: int = SEARCH_LIMIT) -> list[DelayedEntry]:
    """Entries whose task name contains `text` (any case), by due time; at most `limit`."""
    literal = json.dumps(text, ensure_ascii=False)[1:-1]  # as it appears in the JSON
    pattern = f'*"task":"*{_glob_escape(literal)}*'
    needle = text.lower()
    found: list[DelayedEntry] = []
    store = broker.store.schedule
    for shard in delayed_sets_of(broker, queue):
        for body, score in store.scan_delayed(shard, pattern):
            entry = _entry(queue, body, score)
            if entry.message is not None and needle in entry.message.task_name.lower():
                found.append(entry)
                if len(found) >= limit:
                    break
        if len(found) >= limit:
            break
    found.sort(key=lambda entry: entry.due_ms)
    return found


def parse_delayed_ref(ref: str) -> tuple[int, str] | None:
    """(due ms, message id) from a posted reference, or None when malformed."""
    match = REF.match(ref)
    return (int(match.group(1)), match.group(2)) if match else None


def find(broker: Broker, queue: str, ref: str) -> DelayedEntry | None:
    """The waiting entry a reference points to, if it is still there."""
    parsed = parse_delayed_ref(ref)
    if parsed is None:
        return None
    due_ms, message_id = parsed
    store = broker.store.schedule
    for shard in delayed_sets_of(broker, queue):
        for body, score in store.delayed_at(shard, due_ms):
            entry = _entry(queue, body, score)
            if entry.message is not None and entry.message.id == message_id:
                return entry
    return None


def take(broker: Broker, queue: str, ref: str, *, run: bool) -> TaskMessage | None:
    """Atomically remove an entry; onto the stream at once when `run`. None if gone."""
    parsed = parse_delayed_ref(ref)
    if parsed is None:
        return None
    due_ms, message_id = parsed
    store = broker.store.schedule
    for shard in delayed_sets_of(broker, queue):
        body = store.take_delayed(shard, due_ms, message_id, run)
        if body is None:
            continue
        try:
            message = TaskMessage.from_json(body)
            message.check_lock_key(broker.prefix, shard)
        except InvalidTaskPayload as exc:
            # Taken all the same: run, the worker records it as failed; cancelled, it is
            # gone, and a lock it may name is not released (it is not a usable key).
            logger.warning("delayed entry %s of queue %s is not a usable message (%s); %s",
                           ref, queue, exc, "moved to the stream" if run else "dropped")
            return TaskMessage(id=message_id, task_name="", queue=queue, payload=None)
        message.queue = shard  # where its lock and task_id live (as in the worker)
        if not run:
            release_unique_lock_on_cancel(broker, message)
        message.queue = queue
        return message
    return None


def release_unique_lock_on_cancel(broker: Broker, message: TaskMessage) -> None:
    """Free the unique lock (in every mode) and the task_id a cancelled task holds,
    only where this task still holds them (a newer holder is left alone).

    The entry is gone already: an error here is logged, and the lock frees at its TTL.
    """
    if not (message.lock_key or message.has_task_id):
        return
    try:
        locks.release_with(broker.store.locks, message, locks.CANCELLED)
    except Exception:
        logger.exception("task=%s id=%s: cancelled, but its unique lock or task id could "
                         "not be freed; it frees at its TTL", message.task_name, message.id)


def queues_with_counts(broker: Broker, queues: list[str]) -> list[tuple[str, int]]:
    """Each queue with the number of messages in its delayed set(s), in one round trip."""
    found = broker.levels_in_use(sharding.all_shards(queues))
    shards = [[stream for shard in sharding.shards(queue) for stream in found[shard]]
              for queue in queues]
    counts = iter(broker.store.schedule.count_delayed(list(itertools.chain.from_iterable(shards))))
    return [(queue, sum(next(counts) for _ in names))
            for queue, names in zip(queues, shards, strict=True)]


class DelayedTaskAdmin(RedisPageAdmin):
    """No database table: a list read from Redis, with run-now and cancel actions."""

    title = "Delayed tasks"

    def get_urls(self) -> list[URLPattern]:
        return [page_path(self, "", self.changelist_view, "changelist"),
                page_path(self, "action/", self.action_view, "action")]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of one queue's delayed set, or the matches of a task-name search."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        broker = get_store().streams
        try:
            queues = queues_with_counts(
                broker, dashboard_queues(broker))
        except REDIS_ERROR as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        queue = self._chosen_queue(request.GET.get("queue", ""), queues)
        query = request.GET.get("q", "").strip()[:200]
        entries: Any = (search(broker, queue, query) if query
                        else DelayedSet(broker, queue))
        page = Paginator(entries, PER_PAGE).get_page(request.GET.get("p"))
        page.object_list = with_limit_waits(broker, list(page.object_list))
        allowed = [(name, label) for name, (perm, label) in ACTIONS.items()
                   if request.user.has_perm(perm)]
        return self.render(request, "change_list.html", {
            "queues": queues, "queue": queue, "query": query, "page_obj": page,
            "actions": allowed, "search_limit": SEARCH_LIMIT,
            "action_url": reverse(f"{self.admin_site.name}:django_taskrunner_delayedtask_action"),
            "page_query": urlencode({"queue": queue, "q": query}),
        })

    def action_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: confirm, then run now or cancel the selected entries."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = request.POST.get("action", "")
        if action not in ACTIONS:
            return HttpResponseBadRequest("unknown action")
        if not request.user.has_perm(ACTIONS[action][0]):
            raise PermissionDenied
        queue = request.POST.get("queue", "")
        refs = [ref for ref in request.POST.getlist("selected") if parse_delayed_ref(ref)]
        if not QUEUE_NAME.match(queue) or len(refs) > MAX_SELECTED:
            return HttpResponseBadRequest("bad queue name or too many entries selected")
        back = self._changelist_url(queue)
        if not refs:
            self.message_user(request, "Select at least one delayed task.", messages.WARNING)
            return HttpResponseRedirect(back)
        broker = get_store().streams
        if request.POST.get("confirm") != "yes":
            found = [entry for ref in refs if (entry := find(broker, queue, ref))]
            return self.render(request, "confirm.html", {
                "action": action, "action_label": ACTIONS[action][1], "queue": queue,
                "entries": found, "missing": len(refs) - len(found), "back_url": back,
                "action_url": reverse(
                    f"{self.admin_site.name}:django_taskrunner_delayedtask_action"),
            })
        done = sum(1 for ref in refs if take(broker, queue, ref, run=action == "run"))
        verb = "Moved to the queue" if action == "run" else "Cancelled"
        self.message_user(request, f"{verb}: {done} delayed task(s).", messages.SUCCESS)
        if done < len(refs):
            self.message_user(request, f"{len(refs) - done} were no longer waiting (already "
                                       f"run or cancelled).", messages.WARNING)
        return HttpResponseRedirect(back)

    def _chosen_queue(self, asked: str, queues: list[tuple[str, int]]) -> str:
        names = [name for name, _ in queues]
        if asked in names:
            return asked
        busy = [name for name, count in queues if count]
        return busy[0] if busy else (names[0] if names else get_settings().DEFAULT_QUEUE)

    def _changelist_url(self, queue: str) -> str:
        url = reverse(f"{self.admin_site.name}:django_taskrunner_delayedtask_changelist")
        return f"{url}?{urlencode({'queue': queue})}"
