"""The admin's "Tasks" pages: queued, running, delayed and finished tasks of each queue,
or the queued or running ones of all queues together (its opening list, merged by
below), and one task's page, read from Redis through the unmanaged `Task` model.

Nothing here reads a whole stream. A page of queued tasks is one XRANGE (or XREVRANGE)
from a cursor, a page of running ones one XPENDING from a cursor; a search by task name
or id walks at most `SEARCH_SCAN` entries per page and says where it stopped. The
running list refreshes itself every few seconds through `live/`, a JSON view polled by
`static/django_taskrunner/refresh.js`. Opening any of it takes the "view" permission of
`Task`; it changes nothing. Unknown ids, queues and streams answer 404.

The finished list reads a queue's recently finished tasks, newest first, from their task
records through the queue's finished index (`keys.finished_key`, written with each final
record in the acker's batch), which holds ids scored by finish time: a page reads a batch
of ids from a score cursor and the records of those ids (`FinishedIndex.page`), never
the whole index, and at most `FINISHED_SCAN` ids per page when a status filter skips
most of them.

The task page shows everything known about one task, collected by `gather()`: its task
record (status, result or error, progress, attempts, times), where its message is, its
lock and failed rows. It never reads a whole stream: the record's stream id names the
entry, and a lookup by id alone searches at most `FIND_SCAN` entries. To those with the
"cancel" permission it shows a Cancel button: a POST (with CSRF) answered by a
confirmation page, then `cancel(id)` on "yes".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import URLPattern, reverse
from django.utils.html import escape
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe

from django_taskrunner.admin.delayed import DelayedCounts, delayed_counts
from django_taskrunner.admin.shared import (
    RedisPageAdmin,
    decode_body,
    page_path,
    stream_names,
    valid_stream,
)
from django_taskrunner.admin.timeline import duration as timeline_duration
from django_taskrunner.admin.timeline import moment, timeline
from django_taskrunner.core import clock, sharding
from django_taskrunner.core import unique as locks
from django_taskrunner.core.context import shown as shown_steps
from django_taskrunner.core.message import MAX_EPOCH_MS, TaskMessage
from django_taskrunner.core.records import TaskRecord, cancel, lookup
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.models import FailedTask
from django_taskrunner.stats.figures import dashboard_queues
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.errors import REDIS_DOWN, REPLY_ERROR
from django_taskrunner.store.inspect import (
    STREAM_ID,
    Held,
    StreamBrowser,
    StreamEntry,
    stream_id_key,
)
from django_taskrunner.store.records import FinishedIndex, FinishedRow

REFRESH_SECONDS = 5
CANCEL_PERMISSION = "django_taskrunner.cancel_task"
PER_PAGE = 50  # rows of a list (queued, running or finished)
SEARCH_SCAN = 5000  # stream entries a search page walks at most
PAYLOAD_PREVIEW = 300  # characters of payload shown per row of a list
OUTCOMES = ("succeeded", "failed", "cancelled", "expired")
FINISHED_SCAN = 2000  # index ids a finished page reads at most (a filter matching few)
# Stream entries a lookup by message id looks at, at most, in batches searched on the
# server (a batch blocks Redis well under a millisecond).
FIND_SCAN = 200_000
FIND_BATCH = 1000
# How far before a record's dispatch time a search for its message starts (the clocks of
# the dispatching host and of the Redis server may differ that much).
CLOCK_SLACK_MS = 5 * 60 * 1000
STATUSES = ("queued", "running", "delayed")


def body_text(body: bytes | None) -> str:
    return "" if body is None else body.decode("utf-8", errors="replace")


def pretty_payload(message: TaskMessage | None, body: bytes | None) -> str:
    """The payload as indented JSON; the raw body for a message that does not decode."""
    if message is None:
        return body_text(body)
    return json.dumps(message.payload, indent=2, ensure_ascii=False, sort_keys=True)


def moment_text(ms: int | None) -> str:
    """`moment`, the console's one time format; "" when unknown (a crafted time is
    clamped to the latest one a datetime holds)."""
    return moment(min(ms, MAX_EPOCH_MS)) if ms else ""


def _duration(ms: int | None) -> str:
    """A duration for people, ms below a second (`timeline.duration`); "" when unknown."""
    return "" if ms is None else timeline_duration(ms)


DEFAULT_LOOKS = 20  # streams looked at for the Tasks page's opening choice


def busiest(browser: Any, streams: list[str]) -> tuple[str, str]:
    """The first stream with running tasks, else the first with queued ones, else the
    first (queued): the opening list's status is the one found here."""
    waiting = ""
    for stream in streams[:DEFAULT_LOOKS]:
        state = browser.group_state(stream)
        if state.pending:
            return stream, "running"
        if state.waiting and not waiting:
            waiting = stream
    return waiting or (streams[0] if streams else ""), "queued"


def record_times(record: TaskRecord | None) -> dict[str, str]:
    """The record's times as the page shows every time: with seconds, one format."""
    if record is None:
        return {}
    return {"dispatched": moment(record.dispatched_at) if record.dispatched_at else "unknown",
            "due": moment(record.due_at) if record.due_at else "",
            "started": moment(record.started_at) if record.started_at else "not yet",
            "finished": moment(record.finished_at) if record.finished_at else "not yet"}


def dotted_name(name: str) -> SafeString:
    """`name` escaped, with a line-break opportunity after each dot: a long dotted task
    name in a narrow column wraps between its parts, not in the middle of a word."""
    return mark_safe(escape(name).replace(".", ".<wbr>"))  # noqa: S308 - escaped first


def stream_id_after(candidate: str, floor: str) -> bool:
    """`candidate` is a well-formed stream id after `floor`."""
    return bool(STREAM_ID.match(candidate)) and stream_id_key(candidate) >= stream_id_key(floor)


@dataclass
class TaskFacts:
    """Everything known about one task, from the stream, the delayed set, its lock and
    the failed-task table. A later step adds what its record says (status, result,
    progress, error) here."""

    queue: str  # the stream (queue or shard) it was found in
    message_id: str = ""
    stream_id: str = ""
    status: str = ""  # "queued", "running", "delayed", or "" when only a failed row is left
    message: TaskMessage | None = None
    body: bytes | None = None
    consumer: str = ""
    idle_ms: int | None = None
    deliveries: int | None = None
    due_ms: int | None = None
    lock_held: bool | None = None  # None: it names no lock
    task_id_held: bool | None = None  # None: its id is not a reserved task_id
    failed_rows: list[FailedTask] = field(default_factory=list)
    searched: int = 0  # stream entries walked to find it by message id
    record: TaskRecord | None = None  # its task record, when it has one in this queue

    @property
    def result_pretty(self) -> str:
        record = self.record
        if record is None or record.status != "succeeded" or record.error:
            return ""
        return json.dumps(record.result, indent=2, ensure_ascii=False, sort_keys=True)

    @property
    def progress_pretty(self) -> str:
        record = self.record
        if record is None or record.progress is None:
            return ""
        return json.dumps(record.progress, indent=2, ensure_ascii=False, sort_keys=True)

    @property
    def cancellable(self) -> bool:
        """Its record says it has not finished, and no cancel was asked for yet."""
        record = self.record
        return record is not None and not record.finished and not record.cancel_requested

    @property
    def terminable(self) -> bool:
        """Its record says it runs: `cancel(id, terminate=True)` can stop it (even after
        a plain cancel it ignored)."""
        record = self.record
        return record is not None and record.status == "running"

    @property
    def task_name(self) -> str:
        if self.message is not None:
            return self.message.task_name
        if self.record is not None:
            return self.record.task_name
        return self.failed_rows[0].task_name if self.failed_rows else "(undecodable message)"

    @property
    def payload_pretty(self) -> str:
        """From its message while Redis holds it; once it finished, from its record (the
        payload it ran with), else from its failed-task row."""
        if self.message is None and self.body is None:
            record = self.record
            if record is not None and record.finished and record.payload is not None:
                return json.dumps(record.payload, indent=2, ensure_ascii=False, sort_keys=True)
            if self.failed_rows:
                return self.failed_rows[0].payload
        return pretty_payload(self.message, self.body)

    @property
    def dispatched(self) -> str:
        return moment_text(self.message.dispatched_at_ms) if self.message else ""

    @property
    def due(self) -> str:
        return moment_text(self.due_ms)

    @property
    def idle(self) -> str:
        return _duration(self.idle_ms)

    @property
    def found(self) -> bool:
        return bool(self.status or self.failed_rows or self.record)


def gather(browser: StreamBrowser, queue: str, *, stream_id: str = "",
           message_id: str = "", hint: str = "") -> TaskFacts:
    """The facts of the task at `stream_id` of stream `queue`, or of message `message_id`
    (looked for in the first FIND_SCAN entries of the stream, then in the delayed set).

    `hint` says where a link came from, so the likely place is read first: "delayed"
    (the delayed set before the stream), "failed" (a failed row: its message left Redis,
    nothing is searched). Only `queue`'s keys under this site's prefix are read: an id
    of another queue or prefix is not found. `facts.found` is False for an unknown id.
    """
    facts = TaskFacts(queue=queue, message_id=message_id)
    record = record_in(message_id, queue) if message_id and not stream_id else None
    if stream_id:
        if STREAM_ID.match(stream_id):
            _from_stream(browser, facts, stream_id)
    elif message_id and hint != "failed" and not _from_record(browser, facts, record):
        if hint != "delayed" or not _find_delayed(browser, facts, message_id):
            _find_by_id(browser, facts, message_id, _search_start(record))
    if facts.message is not None:
        if facts.message.id != message_id:
            record = None
        facts.message_id = facts.message.id
        _held_keys(browser, facts)
    if facts.message_id:
        facts.record = record if record is not None else record_in(facts.message_id, queue)
        facts.failed_rows = list(FailedTask.objects.filter(
            message_id=facts.message_id, queue=keys.queue_of(queue)).order_by("-failed_at")[:10])
    return facts


def record_in(message_id: str, queue: str) -> TaskRecord | None:
    """The task record of `message_id` when it belongs to `queue`'s queue (a crafted id of
    another queue shows nothing and cannot be cancelled from this page)."""
    record = lookup(message_id)
    if record is None or record.queue != keys.queue_of(queue):
        return None
    return record


def _from_record(browser: StreamBrowser, facts: TaskFacts, record: TaskRecord | None) -> bool:
    """True when the task's record settles where it is, so nothing is searched: a final
    record (its message left the stream), or the entry its stream id names (read at
    once). False: search (no record, or one that does not know its entry)."""
    if record is None:
        return False
    if record.finished:
        return True
    if record.status == "delayed":
        return _find_delayed(browser, facts, record.id)
    if record.stream_id and record.shard == facts.queue and STREAM_ID.match(record.stream_id):
        _from_stream(browser, facts, record.stream_id)
        if facts.message is not None and facts.message.id != record.id:
            facts.status, facts.stream_id, facts.body, facts.message = "", "", None, None
        return bool(facts.status)
    return False


def _from_stream(browser: StreamBrowser, facts: TaskFacts, stream_id: str) -> None:
    held = browser.holder_of(facts.queue, stream_id)
    if held is not None:
        facts.status, facts.stream_id, facts.body = "running", stream_id, held.body
        facts.consumer, facts.idle_ms, facts.deliveries = (held.consumer, held.idle_ms,
                                                           held.deliveries)
    else:
        entry = browser.entry(facts.queue, stream_id)
        if entry is None:
            return
        floor = browser.group_state(facts.queue).last_delivered
        if not stream_id_after(stream_id, floor) or stream_id == floor:
            return  # delivered and acked: done (DELETE_ON_ACK off keeps it)
        facts.status, facts.stream_id, facts.body = "queued", stream_id, entry.body
    facts.message = decode_body(facts.body)


def _search_start(record: TaskRecord | None) -> str:
    """Where a search of the stream for a task may start: `CLOCK_SLACK_MS` before its
    record's dispatch time (a stream id is the server's clock at XADD), else the start."""
    if record is None or record.dispatched_at is None:
        return "0-0"
    start = int(record.dispatched_at.timestamp() * 1000) - CLOCK_SLACK_MS
    return f"{max(0, start)}-0"


def _find_by_id(browser: StreamBrowser, facts: TaskFacts, message_id: str,
                start: str = "0-0") -> None:
    """Search the stream from `start` (then from its beginning, when not found after a
    later start: the clocks of the server and the dispatcher disagree), then the
    delayed set."""
    if _search_for(browser, facts, message_id, start) or start == "0-0":
        return
    _search_for(browser, facts, message_id, "0-0")


def _search_for(browser: StreamBrowser, facts: TaskFacts, message_id: str, cursor: str) -> bool:
    needle = b'"id":' + json.dumps(message_id, ensure_ascii=False).encode("utf-8")
    while cursor and facts.searched < FIND_SCAN:
        candidates, cursor = browser.find_in_stream(facts.queue, cursor, FIND_BATCH, needle)
        facts.searched += FIND_BATCH
        for stream_id in candidates:
            entry = browser.entry(facts.queue, stream_id)
            message = decode_body(entry.body) if entry is not None else None
            if message is not None and message.id == message_id:
                _from_stream(browser, facts, stream_id)
                if facts.status:
                    return True
    return _find_delayed(browser, facts, message_id)


def _find_delayed(browser: StreamBrowser, facts: TaskFacts, message_id: str) -> bool:
    literal = json.dumps(message_id, ensure_ascii=False)
    for body, score in browser.scan_delayed(facts.queue, f'"id":{literal}', 10):
        message = decode_body(body)
        if message is not None and message.id == message_id:
            facts.status, facts.body, facts.message = "delayed", body, message
            facts.due_ms = int(min(max(score, 0), MAX_EPOCH_MS))
            return True
    return False


def _held_keys(browser: StreamBrowser, facts: TaskFacts) -> None:
    """Whether its lock and task_id still hold this dispatch's value."""
    message = facts.message
    assert message is not None
    holder = locks.holder_value(message)
    names = []
    lock_ok = False
    if message.lock_key:
        try:
            message.check_lock_key(browser.prefix, facts.queue)
            lock_ok = True
            names.append(message.lock_key)
        except InvalidTaskPayload:
            facts.lock_held = False
    if message.has_task_id:
        names.append(keys.task_id_key(browser.prefix, facts.queue, message.id))
    if not names:
        return
    values = browser.values(names)
    if lock_ok:
        facts.lock_held = values.pop(0) == holder
    if message.has_task_id:
        facts.task_id_held = values.pop(0) == holder


def lock_search(message: TaskMessage | None, prefix: str, queue: str) -> str:
    """What to type in the locks page's search box to find this task's lock."""
    if message is None or not message.lock_key:
        return ""
    start = keys.unique_key_space(prefix, queue)
    return message.lock_key[len(start):] if message.lock_key.startswith(start) else ""


@dataclass(frozen=True)
class TaskRow:
    """One row of the Tasks list."""

    queue: str  # the stream: a queue or one of its shards
    stream_id: str
    message: TaskMessage | None
    body: bytes | None
    consumer: str = ""
    idle_ms: int | None = None
    deliveries: int | None = None

    @property
    def task_name(self) -> str:
        return self.message.task_name if self.message else "(undecodable message)"

    @property
    def message_id(self) -> str:
        return self.message.id if self.message else ""

    @property
    def dispatched(self) -> str:
        return moment_text(self.message.dispatched_at_ms) if self.message else ""

    @property
    def idle(self) -> str:
        return _duration(self.idle_ms)

    @property
    def preview(self) -> str:
        text_ = json.dumps(self.message.payload, ensure_ascii=False, sort_keys=True) if (
            self.message) else body_text(self.body)
        return text_ if len(text_) <= PAYLOAD_PREVIEW else text_[:PAYLOAD_PREVIEW] + "..."


@dataclass(frozen=True)
class RowPage:
    """One page of rows; the cursors of the pages around it ("" for none)."""

    rows: list[TaskRow]
    next_cursor: str = ""
    previous_cursor: str = ""
    scanned: int = 0  # entries a search walked for this page
    search_stopped: bool = False  # the search hit SEARCH_SCAN before filling the page


def matches(message: TaskMessage | None, stream_id: str, needle: str) -> bool:
    """A search hit: the text is in the task name (any case), or is the message or stream id."""
    if message is None:
        return needle == stream_id
    return (needle.lower() in message.task_name.lower() or needle == message.id
            or needle == stream_id)


def queued_page(browser: StreamBrowser, queue: str, *, after: str = "", before: str = "",
                query: str = "", size: int = PER_PAGE) -> RowPage:
    """Waiting (undelivered) messages of one stream, oldest first, from a cursor."""
    floor = browser.group_state(queue).last_delivered
    if before and not query:
        entries = browser.waiting_before(queue, before, floor, size + 1)
        more_before = len(entries) > size
        entries = entries[-size:]
        rows = [_queued(queue, entry) for entry in entries]
        return RowPage(rows, next_cursor=rows[-1].stream_id if rows else "",
                       previous_cursor=rows[0].stream_id if rows and more_before else "")
    start = after if after and stream_id_after(after, floor) else floor
    if not query:
        entries = browser.waiting_after(queue, start, size + 1)
        rows = [_queued(queue, entry) for entry in entries[:size]]
        return RowPage(rows, next_cursor=rows[-1].stream_id if len(entries) > size else "",
                       previous_cursor=rows[0].stream_id if rows and after else "")
    return _search(browser, queue, start, query, size)


def _search(browser: StreamBrowser, queue: str, start: str, query: str, size: int) -> RowPage:
    rows: list[TaskRow] = []
    scanned = 0
    cursor = start
    exhausted = False
    while len(rows) < size and scanned < SEARCH_SCAN:
        entries = browser.waiting_after(queue, cursor, 500)
        if not entries:
            exhausted = True
            break
        for entry in entries:
            scanned += 1
            cursor = entry.stream_id
            message = decode_body(entry.body)
            if matches(message, entry.stream_id, query):
                rows.append(TaskRow(queue, entry.stream_id, message, entry.body))
                if len(rows) >= size:
                    break
    return RowPage(rows, next_cursor="" if exhausted else cursor, scanned=scanned,
                   search_stopped=not exhausted and len(rows) < size)


def _queued(queue: str, entry: StreamEntry) -> TaskRow:
    return TaskRow(queue, entry.stream_id, decode_body(entry.body), entry.body)


def running_page(browser: StreamBrowser, queue: str, *, after: str = "", query: str = "",
                 consumer: str = "", size: int = PER_PAGE) -> RowPage:
    """Pending (delivered, not acked) entries of one stream with their holders (of one
    consumer only, when named)."""
    start = after if STREAM_ID.match(after) else "-"
    held = browser.held(queue, start, size + 1, consumer or None)
    rows = [_running(queue, item) for item in held[:size]]
    if query:
        rows = [row for row in rows if matches(row.message, row.stream_id, query)]
    return RowPage(rows, next_cursor=held[size - 1].stream_id if len(held) > size else "",
                   previous_cursor="-" if after else "")


def fair_page(browser: StreamBrowser, queue: str, fair_key: str, *, after: str = "",
              size: int = PER_PAGE) -> RowPage:
    """The tasks of one fair key waiting for their turn (not on the stream yet), the
    next to run first; the cursor is an index in the key's list."""
    start = int(after) if after.isdigit() else 0
    try:
        bodies = get_store().fair.waiting(queue, fair_key, start, size + 1)
    except REPLY_ERROR:  # not a list (written by hand): no task waits there
        bodies = []
    rows = [TaskRow(queue, "", decode_body(body), body) for body in bodies[:size]]
    return RowPage(rows, next_cursor=str(start + size) if len(bodies) > size else "",
                   previous_cursor="0" if start else "")


def _running(queue: str, item: Held) -> TaskRow:
    return TaskRow(queue, item.stream_id, decode_body(item.body), item.body, consumer=item.consumer,
                   idle_ms=item.idle_ms, deliveries=item.deliveries)


def as_json_row(row: TaskRow) -> dict[str, Any]:
    """A running row for the refreshing list (plain values, escaped by the script)."""
    return {"queue": row.queue, "stream_id": row.stream_id, "task": row.task_name,
            "id": row.message_id, "consumer": row.consumer, "idle": row.idle,
            "deliveries": row.deliveries, "payload": row.preview}


@dataclass(frozen=True)
class FinishedTask:
    """One row of the finished list."""

    task_id: str
    status: str
    task_name: str
    queue: str
    finished_ms: int
    started_ms: int | None
    attempt: str
    worker: str
    error: str

    @property
    def finished(self) -> str:
        return moment_text(self.finished_ms)

    @property
    def task_name_html(self) -> str:
        """The task name, escaped, wrapping after its dots (see `dotted_name`)."""
        return dotted_name(self.task_name)

    @property
    def duration(self) -> str:
        """Run time of the last attempt (none for a task that never started)."""
        if self.started_ms is None or self.started_ms > self.finished_ms:
            return ""
        return _duration(self.finished_ms - self.started_ms)


@dataclass(frozen=True)
class FinishedList:
    """A page of finished tasks, the cursor of the next one ("" at the end), and how
    many ids were read for it (`stopped`: FINISHED_SCAN reached before the page filled)."""

    rows: list[FinishedTask]
    next_cursor: str
    scanned: int
    stopped: bool


def finished_index() -> FinishedIndex:
    """The finished indexes of the app's Redis and prefix."""
    return get_store().finished


def fair_key_filter(request: HttpRequest) -> str:
    """The `?fair_key=` of a Tasks list: only that key's tasks (docs/admin.md)."""
    return request.GET.get("fair_key", "")[:256]


def outcome_filter(value: str) -> str:
    """The status filter of a request: one of OUTCOMES, or "" for all of them."""
    return value if value in OUTCOMES else ""


def finished_page(queue: str, *, cursor: str = "", outcome: str = "",
                  size: int = PER_PAGE) -> FinishedList:
    """One page of `queue`'s finished tasks from `cursor`, of one outcome or all."""
    statuses = frozenset([outcome] if outcome in OUTCOMES else OUTCOMES)
    page = finished_index().page(queue, cursor[:40], size, statuses, FINISHED_SCAN)
    rows = [_row(queue, row) for row in page.rows]
    return FinishedList(rows, page.next_cursor, page.scanned,
                        stopped=bool(page.next_cursor) and len(rows) < size)


def finished_count(queue: str) -> int:
    """How many ids `queue`'s finished index holds (some may have expired since)."""
    return finished_index().count(queue)


def _row(queue: str, row: FinishedRow) -> FinishedTask:
    fields = row.fields
    started = fields.get("st", "")
    return FinishedTask(
        task_id=row.task_id, status=fields.get("s", ""), task_name=fields.get("t", ""),
        queue=fields.get("q", queue), finished_ms=row.finished_ms,
        started_ms=int(started) if started.isdigit() else None,
        attempt=fields.get("a", ""), worker=fields.get("w", ""), error=fields.get("e", ""))


class TaskAdmin(RedisPageAdmin):
    """No database table: tasks read from Redis a page at a time."""

    title = "Tasks"

    def get_urls(self) -> list[URLPattern]:
        return [page_path(self, "", self.changelist_view, "changelist"),
                page_path(self, "detail/", self.detail_view, "detail"),
                page_path(self, "live/", self.live_view, "live"),
                page_path(self, "cancel/", self.cancel_view, "cancel")]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """One page of one stream's queued or running tasks."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        browser = get_store().browse
        try:
            queues = dashboard_queues()
            streams = stream_names(queues, browser)
            stream, status = request.GET.get("queue", ""), request.GET.get("status", "")
            if not stream and status != "finished":  # every queue (its opening list)
                return self._all_view(request, browser, queues, streams, status)
            stream = stream or (streams[0] if streams else "")
            if stream in queues and stream not in streams:  # a split queue: its first shard
                stream = sharding.shards(stream)[0]
            if not valid_stream(stream, queues):
                raise Http404("no such queue")
            if (status := status or "queued") == "finished":
                return self._finished_view(request, stream, streams)
            status = status if status == "running" else "queued"
            query = request.GET.get("q", "").strip()[:200]
            page = self._page(browser, stream, status, query, request)
            state = browser.group_state(stream)
            delayed = delayed_counts(get_store().streams, keys.queue_of(stream))
        except REDIS_DOWN as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        return self.render(request, "change_list.html", {
            "streams": streams, "queue": stream, "status": status, "query": query,
            "page": page, "state": state, "delayed": delayed,
            "delayed_url": self._delayed_url(request, keys.queue_of(stream)),
            **self._list_links(request, stream, status, query, page),
            "refresh_seconds": REFRESH_SECONDS, "search_scan": SEARCH_SCAN,
            "detail_url": reverse(self.url_name("detail")),
        })

    def _all_view(self, request: HttpRequest, browser: Any, queues: list[str],
                  streams: list[str], status: str) -> HttpResponse:
        """The queued (or running) tasks of every queue, merged oldest first; opened
        without a status, the running ones when some run, else the queued ones."""
        if status not in ("queued", "running"):
            status = busiest(browser, streams)[1]
        states = [browser.group_state(stream) for stream in streams[:ALL_STREAMS]]
        row_of = _running if status == "running" else _queued
        rows, next_cursor = merged_page(browser, streams,
                                        [state.last_delivered for state in states], status,
                                        request.GET.get("after", ""), PER_PAGE, row_of)
        counts = [delayed_counts(get_store().streams, queue) for queue in queues[:ALL_STREAMS]]
        filters = {"status": status}
        return self.render(request, "change_list.html", {
            "streams": streams, "queue": "", "all_queues": True, "status": status,
            "page": RowPage(rows, next_cursor=next_cursor),
            "state": {"waiting": sum(state.waiting for state in states),
                      "pending": sum(state.pending for state in states)},
            "delayed": DelayedCounts(sum(c.total for c in counts),
                                     sum(c.on_limit for c in counts),
                                     all(c.exact for c in counts)),
            "delayed_url": self._delayed_url(request, ""),
            "more_streams": max(0, len(streams) - ALL_STREAMS),
            "filters": urlencode(filters),
            "next_query": urlencode({**filters, "after": next_cursor}) if next_cursor else "",
            "first_query": urlencode(filters) if request.GET.get("after") else "",
            "detail_url": reverse(self.url_name("detail")),
        })

    def _list_links(self, request: HttpRequest, stream: str, status: str, query: str,
                    page: RowPage) -> dict[str, str]:
        """The list's filter and paging query strings, and its live view's URL."""
        consumer = request.GET.get("consumer", "")[:200] if status == "running" else ""
        fair_key = fair_key_filter(request)
        filters = {"queue": stream, "status": status, "q": query,
                   **({"consumer": consumer} if consumer else {}),
                   **({"fair_key": fair_key} if fair_key else {})}
        live = (f"{reverse(self.url_name('live'))}?{urlencode({'queue': stream})}"
                if status == "running"
                and not (query or consumer or fair_key or request.GET.get("after"))
                else "")
        return {
            "consumer": consumer, "fair_key": fair_key, "filters": urlencode(filters),
            "next_query": urlencode({**filters, "after": page.next_cursor})
            if page.next_cursor else "",
            "previous_query": urlencode({**filters, "before": page.previous_cursor})
            if page.previous_cursor and status == "queued" and not fair_key else "",
            "first_query": urlencode(filters) if page.previous_cursor else "",
            "live_url": live,
        }

    def _finished_view(self, request: HttpRequest, stream: str, streams: list[str]
                       ) -> HttpResponse:
        """One page of the queue's finished tasks, newest first, read from their records
        (a split queue lists every shard's: the index is the queue's)."""
        queue = keys.queue_of(stream)
        outcome = outcome_filter(request.GET.get("outcome", ""))
        try:
            page = finished_page(queue, cursor=request.GET.get("after", ""),
                                          outcome=outcome)
            count = finished_count(queue)
            state = get_store().browse.group_state(stream)
            delayed = delayed_counts(get_store().streams, queue)
        except REDIS_DOWN as exc:
            return self.render(request, "change_list.html", {"redis_error": str(exc)})
        filters = {"queue": stream, "status": "finished",
                   **({"outcome": outcome} if outcome else {})}
        return self.render(request, "change_list.html", {
            "streams": streams, "queue": stream, "status": "finished", "finished": page,
            "finished_count": count, "outcome": outcome, "outcomes": OUTCOMES,
            "state": state, "delayed": delayed, "finished_scan": FINISHED_SCAN,
            "delayed_url": self._delayed_url(request, queue),
            "filters": urlencode(filters),
            "next_query": urlencode({**filters, "after": page.next_cursor})
            if page.next_cursor else "",
            "first_query": urlencode(filters) if request.GET.get("after") else "",
            "detail_url": reverse(self.url_name("detail")),
        })

    def _page(self, browser: Any, stream: str, status: str, query: str,
              request: HttpRequest) -> RowPage:
        after = request.GET.get("after", "")
        before = request.GET.get("before", "")
        fair_key = fair_key_filter(request)
        if status == "running":
            consumer = request.GET.get("consumer", "")[:200]
            page = running_page(browser, stream, after=after, query=query,
                                consumer=consumer)
            if fair_key:
                page.rows[:] = [row for row in page.rows
                                if row.message and row.message.fair_key == fair_key]
            return page
        if fair_key:
            page = fair_page(browser, stream, fair_key, after=after)
            if query:
                page.rows[:] = [row for row in page.rows if matches(row.message, "", query)]
            return page
        if before and not STREAM_ID.match(before) and before != "+":
            before = ""
        return queued_page(browser, stream, after=after, before=before, query=query)

    def detail_view(self, request: HttpRequest) -> HttpResponse:
        """One task, by `?queue=&stream=<stream id>` or `?queue=&id=<message id>`."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        stream = request.GET.get("queue", "")
        stream_id = request.GET.get("stream", "")
        message_id = request.GET.get("id", "")[:255]
        hint = request.GET.get("from", "")
        browser = get_store().browse
        try:
            facts = self._gather(browser, stream, stream_id, message_id, hint)
        except REDIS_DOWN as exc:
            return self.render(request, "detail.html", {"redis_error": str(exc)})
        if not facts.found:
            raise Http404("no such task in this queue")
        return self.render(request, "detail.html", {
            "title": f"Task {facts.message_id or facts.stream_id}", "facts": facts,
            "links": self._links(request, facts),
            "changelist_url": reverse(self.url_name("changelist")),
            "timeline": timeline(facts.record, clock.now_ms()) if facts.record else None,
            "times": record_times(facts.record),
            "can_cancel": facts.cancellable and request.user.has_perm(CANCEL_PERMISSION),
            "can_terminate": facts.terminable and request.user.has_perm(CANCEL_PERMISSION),
            "cancel_url": reverse(self.url_name("cancel")),
            "steps": shown_steps(facts.record.steps) if facts.record else [],  # docs/steps.md
        })

    def cancel_view(self, request: HttpRequest) -> HttpResponse:
        """POST only: confirm, then cancel one task of one queue (by its record)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(CANCEL_PERMISSION):
            raise PermissionDenied
        queue = request.POST.get("queue", "")
        message_id = request.POST.get("id", "")[:255]
        try:
            known = dashboard_queues()
            if not valid_stream(queue, known) and queue not in known:
                raise Http404("no such queue")
            record = record_in(message_id, queue) if message_id else None
            if record is None:
                raise Http404("no such task in this queue")
            back = (f"{reverse(self.url_name('detail'))}?"
                    f"{urlencode({'queue': queue, 'id': message_id})}")
            terminate = request.POST.get("terminate") == "yes"
            if request.POST.get("confirm") != "yes":
                verb = "Terminate" if terminate else "Cancel"
                return self.render(request, "cancel_confirm.html", {
                    "title": f"{verb} task {message_id}?", "record": record, "queue": queue,
                    "terminate": terminate, "back_url": back,
                    "cancel_url": reverse(self.url_name("cancel"))})
            done = cancel(message_id, terminate=terminate)
        except REDIS_DOWN as exc:
            return self.render(request, "detail.html", {"redis_error": str(exc)})
        if done:
            what = "Terminated" if terminate else "Cancelled"
            self.message_user(request, f"{what} task {message_id} ({record.task_name}).",
                              messages.SUCCESS)
        else:
            self.message_user(request, f"Task {message_id} had finished already; nothing "
                                       f"was cancelled.", messages.WARNING)
        return HttpResponseRedirect(back)

    def _gather(self, browser: Any, stream: str, stream_id: str, message_id: str,
                hint: str) -> TaskFacts:
        """The facts from one stream; a split queue's name looks in each of its shards."""
        queues = dashboard_queues()
        if stream in queues and stream not in stream_names(queues):
            candidates = browser.streams(sharding.shards(stream))
        elif valid_stream(stream, queues):
            candidates = [stream]
        else:
            raise Http404("no such queue")
        if message_id and not stream_id and len(candidates) > 1:
            record = record_in(message_id, candidates[0])  # its shard first
            if record is not None and record.shard in candidates:
                candidates = [record.shard, *(c for c in candidates if c != record.shard)]
        for shard in candidates:
            facts = gather(browser, shard, stream_id=stream_id,
                                    message_id=message_id, hint=hint)
            if facts.found:
                return facts
        return facts

    def _links(self, request: HttpRequest, facts: TaskFacts) -> dict[str, Any]:
        """Where the page links to, for those who may open it."""
        site = self.admin_site.name
        user = request.user
        queue = keys.queue_of(facts.queue)
        links: dict[str, Any] = {
            "queue": f"{reverse(self.url_name('changelist'))}?"
                     f"{urlencode({'queue': facts.queue, 'status': facts.status or 'queued'})}",
        }
        if user.has_perm("django_taskrunner.view_queue"):
            links["dashboard"] = (f"{reverse(f'{site}:django_taskrunner_queue_changelist')}?"
                                  f"{urlencode({'queue': queue})}")
        if user.has_perm("django_taskrunner.view_failedtask"):
            links["failed"] = [(row, reverse(f"{site}:django_taskrunner_failedtask_change",
                                             args=[row.pk]), moment(row.failed_at))
                               for row in facts.failed_rows]
        search = lock_search(facts.message, get_store().browse.prefix, facts.queue)
        if search and user.has_perm("django_taskrunner.view_uniquelock"):
            links["lock"] = (f"{reverse(f'{site}:django_taskrunner_uniquelock_changelist')}?"
                             f"{urlencode({'queue': facts.queue, 'q': search})}")
        if facts.status == "delayed":
            links["delayed"] = self._delayed_url(request, queue)
        return links

    def _delayed_url(self, request: HttpRequest, queue: str) -> str:
        if not request.user.has_perm("django_taskrunner.view_delayedtask"):
            return ""
        url = reverse(f"{self.admin_site.name}:django_taskrunner_delayedtask_changelist")
        return f"{url}?{urlencode({'queue': queue})}" if queue else url

    def live_view(self, request: HttpRequest) -> JsonResponse:
        """The running tasks of one stream (first page), as JSON for refresh.js."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        stream = request.GET.get("queue", "")
        browser = get_store().browse
        try:
            if not valid_stream(stream, dashboard_queues()):
                raise Http404("no such queue")
            page = running_page(browser, stream)
        except REDIS_DOWN as exc:
            return JsonResponse({"error": f"Redis cannot be reached: {exc}"}, status=503)
        detail = reverse(self.url_name("detail"))
        return JsonResponse({"rows": [
            {**as_json_row(row),
             "url": f"{detail}?{urlencode({'queue': row.queue, 'stream': row.stream_id})}"}
            for row in page.rows], "more": bool(page.next_cursor)})


# The Tasks page's list across every queue, its opening list: the queued or running
# tasks of all streams together, oldest first, a page at a time.
#
# A page reads at most one page plus one entry from each stream (queued: one XRANGE from
# the stream's delivery floor or its cursor; running: one XPENDING from its cursor), merges
# them by stream id (the time each entry was added) and shows the first `PER_PAGE`. The
# "next page" cursor holds each stream's own position, the last id of it shown
# (`stream~id,...`), so no stream is read from its start again, and no row is lost or shown
# twice when two streams hold the same id. At most `ALL_STREAMS` streams are read; the page
# says when there are more (each stays reachable from its own list).

ALL_STREAMS = 50  # streams one page of the list across all queues reads, at most
ALL = "all"  # the "queue" of that list in the page's address


def parse_positions(text: str, streams: list[str]) -> dict[str, str]:
    """Each stream's position from a cursor ("stream~id,..."); a malformed part, or one
    naming a stream not in `streams`, is dropped (that stream starts at its start)."""
    positions: dict[str, str] = {}
    known = set(streams)
    for part in text[:20_000].split(",")[:ALL_STREAMS]:
        stream, _sep, stream_id = part.rpartition("~")
        if stream in known and STREAM_ID.match(stream_id):
            positions[stream] = stream_id
    return positions


def positions_text(positions: dict[str, str]) -> str:
    """The cursor of `positions`: "stream~id,..."."""
    return ",".join(f"{stream}~{stream_id}" for stream, stream_id in sorted(positions.items()))


def merged_page(browser: Any, streams: list[str], floors: list[str], status: str,
                after: str, size: int, row_of: Any) -> tuple[list[Any], str]:
    """One page of every stream's queued (or running) rows, merged oldest first, and the
    cursor of the next page ("" at the end). `floors`: each stream's last delivered id
    (its group state, which the page reads anyway); `row_of(stream, item)` builds a row."""
    positions = parse_positions(after, streams)
    candidates: list[tuple[tuple[int, int], str, Any]] = []
    for stream, floor in zip(streams[:ALL_STREAMS], floors, strict=False):
        for item in _read(browser, stream, floor, status, positions.get(stream, ""),
                          size + 1):
            candidates.append((stream_id_key(item.stream_id), stream, item))
    candidates.sort(key=lambda found: (found[0], found[1]))
    shown = candidates[:size]
    for _key, stream, item in shown:
        positions[stream] = item.stream_id
    rows = [row_of(stream, item) for _key, stream, item in shown]
    return rows, positions_text(positions) if len(candidates) > size else ""


def _read(browser: Any, stream: str, floor: str, status: str, after: str, count: int
          ) -> list[Any]:
    """Up to `count` entries of `stream` past `after` ("" from the start): waiting ones
    (past the group's delivery floor `floor` too) or pending ones."""
    if status == "running":
        return browser.held(stream, after or "-", count)
    start = after if after and stream_id_key(after) > stream_id_key(floor) else floor
    return browser.waiting_after(stream, start, count)
