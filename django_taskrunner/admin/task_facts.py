"""What the admin's task page shows: everything known about one task (`gather`), and
the helpers every Tasks page shares (stream names, decoding, times). The lists of queued
and running tasks are `task_rows.py`.

`gather()` is the one function that collects the facts of one task, its task record
(status, result or error, progress, attempts, times) included, and the detail page
shows whatever it holds. It never reads a whole stream: the record's stream id names the
entry, and a lookup by id alone searches at most `FIND_SCAN` entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from django_taskrunner.checks import QUEUE_NAME
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.records import TaskRecord, lookup
from django_taskrunner.core.wire import MAX_EPOCH_MS
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.models import FailedTask
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.browse import STREAM_ID, StreamBrowser, stream_id_key

# Stream entries a lookup by message id looks at, at most, in batches searched on the
# server (a batch blocks Redis well under a millisecond).
FIND_SCAN = 200_000
FIND_BATCH = 1000
# How far before a record's dispatch time a search for its message starts (the clocks of
# the dispatching host and of the Redis server may differ that much).
CLOCK_SLACK_MS = 5 * 60 * 1000
STATUSES = ("queued", "running", "delayed")


def stream_names(queues: list[str], browser: StreamBrowser | None = None) -> list[str]:
    """Every stream of these queues: a queue, or each shard of a split one; with a
    `browser`, also each priority level in use (docs/priorities.md)."""
    shards = sharding.all_shards(queues)
    return shards if browser is None else browser.streams(shards)


def valid_stream(name: str, queues: list[str]) -> bool:
    """`name` is a stream of one of `queues` (a crafted name never reaches Redis)."""
    queue = keys.queue_of(name)
    shard = keys.shard_of(name)
    return (bool(QUEUE_NAME.match(queue)) and queue in queues and shard in sharding.shards(queue)
            and (name == shard or name in keys.level_names(shard)))


def decode(body: bytes | None) -> TaskMessage | None:
    """The message in a body; None when it is missing or does not decode."""
    if body is None:
        return None
    try:
        return TaskMessage.from_json(body)
    except InvalidTaskPayload:
        return None


def body_text(body: bytes | None) -> str:
    return "" if body is None else body.decode("utf-8", errors="replace")


def pretty_payload(message: TaskMessage | None, body: bytes | None) -> str:
    """The payload as indented JSON; the raw body for a message that does not decode."""
    if message is None:
        return body_text(body)
    return json.dumps(message.payload, indent=2, ensure_ascii=False, sort_keys=True)


def moment_text(ms: int | None) -> str:
    if not ms:
        return ""
    moment = timezone.localtime(datetime.fromtimestamp(min(ms, MAX_EPOCH_MS) / 1000, tz=UTC))
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.tzname()}"


def duration(ms: int | None) -> str:
    if ms is None:
        return ""
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


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
    def task_name(self) -> str:
        if self.message is not None:
            return self.message.task_name
        if self.record is not None:
            return self.record.task_name
        return self.failed_rows[0].task_name if self.failed_rows else "(undecodable message)"

    @property
    def payload_pretty(self) -> str:
        if self.message is None and self.body is None and self.failed_rows:
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
        return duration(self.idle_ms)

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
    facts.message = decode(facts.body)


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
            message = decode(entry.body) if entry is not None else None
            if message is not None and message.id == message_id:
                _from_stream(browser, facts, stream_id)
                if facts.status:
                    return True
    return _find_delayed(browser, facts, message_id)


def _find_delayed(browser: StreamBrowser, facts: TaskFacts, message_id: str) -> bool:
    literal = json.dumps(message_id, ensure_ascii=False)
    for body, score in browser.scan_delayed(facts.queue, f'"id":{literal}', 10):
        message = decode(body)
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
