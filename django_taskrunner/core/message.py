"""`TaskMessage`: what travels on a stream, and its versioned JSON wire format.

A stream entry has one field, `m`, holding a JSON object. Readers tolerate unknown
fields and fill missing optional ones with defaults, so messages written by an older
or newer release still decode. Only `v`, `id` and `task` are required.

Whatever an entry holds, `from_json` returns a message whose every field has the type
and range the worker relies on, or raises `InvalidTaskPayload`: never another error, so
no entry can stop the worker or the reclaimer. The same limits apply when a message is
encoded (`to_json`, on every dispatch path): a payload nested more than
`PAYLOAD_MAX_DEPTH` levels, a message over `MESSAGE_MAX_BYTES` of UTF-8 JSON, or text
that is not valid Unicode (a lone surrogate) is refused before it reaches Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django_taskrunner.core import wire
from django_taskrunner.core.wire import (
    MAX_EPOCH_MS,
    MESSAGE_MAX_BYTES,
    PAYLOAD_MAX_DEPTH,
    WIRE_VERSION,
    nested_too_deep,
)
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.store import keys


def check_payload(payload: Any, task_name: str) -> None:
    """Raise `InvalidTaskPayload` for a payload nested past `PAYLOAD_MAX_DEPTH`."""
    if nested_too_deep(payload):
        raise InvalidTaskPayload(
            f"payload of task {task_name!r} is nested more than {PAYLOAD_MAX_DEPTH} levels "
            f"deep (or contains itself)", task_name=task_name)


def _plainly_valid(text: str) -> bool:
    """ASCII, within MESSAGE_MAX_BYTES and with too few brackets to nest too deep: the
    common message, which passes in a few C calls (anything else gets `_check_text`)."""
    return (text.isascii() and len(text) <= MESSAGE_MAX_BYTES
            and text.count("{") + text.count("[") <= PAYLOAD_MAX_DEPTH)


@dataclass(slots=True)
class TaskMessage:
    """One dispatched task: its id stays the same across retries."""

    id: str
    task_name: str
    queue: str
    payload: Any
    attempt: int = 1
    dispatched_at_ms: int = 0
    # Unique lock held by this message: its Redis key and release mode (or None).
    lock_key: str | None = None
    unique_mode: str | None = None
    # True when `id` is a caller-chosen task_id reserved in Redis.
    has_task_id: bool = False
    # Epoch ms after which the task must not start (None: never expires).
    expires_at_ms: int | None = None
    # The task's own reservation timeout in ms (None: the worker's RESERVATION_TIMEOUT).
    reservation_timeout_ms: int | None = None
    # Random per dispatch of a message that holds a lock or a task_id, kept across its
    # retries: tells two dispatches of one task_id apart (None: holding nothing, or
    # queued by an earlier version, whose lock and task_id hold the id alone).
    dispatch_token: str | None = None
    # The W3C `traceparent` of the dispatch's span (wire key "tc"), when traced: the
    # worker's span of each attempt is its child (django_taskrunner/tracing.py).
    trace_context: str | None = None
    # The workflow this message is a member of (wire key "wf"): {"id": workflow id,
    # "j": member index, "k": stage index, "nx": shards of the next stage, "xr": a later
    # step's expiry in ms after it is sent}; None outside any workflow (core/workflows.py).
    workflow: dict[str, Any] | None = None
    # Priority 0..9 (wire key "pr"), None for the default: which level stream of its
    # queue the message goes to (store/keys.py `level_name`), on dispatch and move.
    priority: int | None = None
    # Fair key (wire key "fk"), None outside fair queues: the key whose turns the message
    # waits for (store/fair.py); a retry or a due delayed message rejoins its key's turn.
    fair_key: str | None = None
    # The key's turns in a row (wire key "fw"), None for 1: kept with the message so a
    # due delayed one rejoins its key's turn with its weight.
    fair_weight: int | None = None
    # True (wire key "rb") on an entry put back on its stream after a run of it may have
    # started (a stopping worker's, an ended process's): its durable steps are read.
    ran_before: bool = False
    # Stream entry id, set by the worker for the delivery it is processing.
    stream_id: str | None = field(default=None, compare=False)

    @property
    def dispatched_at(self) -> datetime:
        """When the task was first dispatched, as an aware UTC datetime."""
        return datetime.fromtimestamp(self.dispatched_at_ms / 1000, tz=UTC)

    def to_json(self) -> str:
        """The wire form; optional fields are left out when unset to keep entries small.

        Raises `InvalidTaskPayload` (naming the task) when the payload is not JSON.
        """
        try:
            text = wire.encode(self._wire_fields())
        except RecursionError:
            check_payload(self.payload, self.task_name)  # raises: it is nested too deep
            raise
        except (TypeError, ValueError) as exc:
            check_payload(self.payload, self.task_name)  # a cycle: "contains itself"
            raise InvalidTaskPayload(
                f"payload of task {self.task_name!r} is not JSON-serialisable: {exc}",
                task_name=self.task_name,
            ) from exc
        if not _plainly_valid(text):
            self._check_text(text)
        return text

    def _wire_fields(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "v": WIRE_VERSION,
            "id": self.id,
            "task": self.task_name,
            "queue": self.queue,
            "payload": self.payload,
            "attempt": self.attempt,
            "ts": self.dispatched_at_ms,
        }
        if self.lock_key is not None:
            data["lock"] = self.lock_key
            data["mode"] = self.unique_mode
        if self.has_task_id:
            data["tid"] = True
        if self.expires_at_ms is not None:
            data["exp"] = self.expires_at_ms
        if self.reservation_timeout_ms is not None:
            data["rt"] = self.reservation_timeout_ms
        if self.dispatch_token is not None:
            data["tok"] = self.dispatch_token
        if self.trace_context is not None:
            data["tc"] = self.trace_context
        if self.workflow is not None:
            data["wf"] = self.workflow
        if self.priority is not None:
            data["pr"] = self.priority
        if self.fair_key is not None:
            data["fk"] = self.fair_key
        if self.fair_weight is not None:
            data["fw"] = self.fair_weight
        if self.ran_before:
            data["rb"] = True
        return data

    def _check_text(self, text: str) -> None:
        """Refuse a payload nested too deep (walked only when the text holds enough
        brackets), text that is not valid Unicode, or over MESSAGE_MAX_BYTES as UTF-8."""
        if wire.could_nest_past(text):
            check_payload(self.payload, self.task_name)
        if text.isascii():  # constant time: CPython knows it of every string
            size = len(text)
        else:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError as exc:
                bad = exc.object[exc.start:exc.end]
                raise InvalidTaskPayload(
                    f"payload of task {self.task_name!r} holds a lone surrogate {bad!r}, "
                    f"which is not text and cannot be sent", task_name=self.task_name,
                ) from None
        if size > MESSAGE_MAX_BYTES:
            raise InvalidTaskPayload(
                f"message of task {self.task_name!r} is {size} bytes of JSON, over the limit "
                f"of {MESSAGE_MAX_BYTES}: pass large data by reference",
                task_name=self.task_name)

    def check_lock_key(self, prefix: str, queue: str) -> None:
        """Raise `InvalidTaskPayload` unless the lock this message names (if any) is a
        unique lock of `queue`, the queue or shard the message was read from.

        The worker deletes and renews that key: any other key (the stream, another
        queue's lock) must not be touched, nor can a key of another type be released.
        """
        if self.lock_key is None:
            return
        space = keys.unique_key_space(prefix, queue)
        if not self.lock_key.startswith(space) or len(self.lock_key) == len(space):
            raise InvalidTaskPayload(
                f"message of task {self.task_name!r} names lock {wire.short(self.lock_key)}, "
                f"which is not a unique lock of queue {queue!r}", task_name=self.task_name)

    @classmethod
    def from_json(cls, raw: bytes | str, *, stream_id: str | None = None) -> TaskMessage:
        """Decode a wire message; anything malformed raises `InvalidTaskPayload`.

        Checks every field the worker uses (type, range, finite numbers), the payload's
        depth, the size, and that the text is valid Unicode.
        """
        data = wire.load(raw)
        get = data.get
        task_name, message_id, queue, attempt, dispatched_at_ms = wire.required(data)
        message = cls(
            id=message_id,
            task_name=task_name,
            queue=queue,
            payload=get("payload"),
            attempt=attempt,
            dispatched_at_ms=dispatched_at_ms,
            lock_key=wire.lock(data, task_name) if "lock" in data else None,
            unique_mode=wire.mode(data, task_name) if "mode" in data else None,
            has_task_id=wire.flag(data, "tid", task_name) if "tid" in data else False,
            expires_at_ms=wire.number(data, "exp", task_name, 0, MAX_EPOCH_MS) if "exp" in data
            else None,
            reservation_timeout_ms=wire.advisory_ms(get("rt")) if "rt" in data else None,
            dispatch_token=wire.dispatch_token(get("tok"), task_name) if "tok" in data
            else None,
            trace_context=wire.traceparent(get("tc")) if "tc" in data else None,
            workflow=wire.workflow_field(get("wf"), task_name) if "wf" in data else None,
            priority=wire.number(data, "pr", task_name, 0, 9) if "pr" in data else None,
            fair_key=wire.fair_key(get("fk"), task_name) if "fk" in data else None,
            fair_weight=wire.number(data, "fw", task_name, 1, 1000) if "fw" in data else None,
            ran_before=wire.flag(data, "rb", task_name) if "rb" in data else False,
            stream_id=stream_id,
        )
        if wire.could_nest_past(raw) and nested_too_deep(message.payload):
            raise InvalidTaskPayload(
                f"payload of task {task_name!r} is nested more than {PAYLOAD_MAX_DEPTH} "
                f"levels deep", task_name=task_name)
        if message.workflow is not None and "xr" in message.workflow:
            _expires_from_entry(message)
        return message


def _expires_from_entry(message: TaskMessage) -> None:
    """A later workflow step's expiry counts from when its workflow sent it: the time in
    its stream entry id (`xr` ms after it), fixed from then on (a retry writes `exp`)."""
    stamp = (message.stream_id or "").partition("-")[0]
    if message.expires_at_ms is None and stamp.isdigit():
        message.expires_at_ms = min(int(stamp) + message.workflow["xr"], MAX_EPOCH_MS)
def holder_parts(body: str, message: TaskMessage) -> tuple[str, str]:
    """`body` (`message.to_json()`) cut around its id and dispatch token: (head, rest).

    A replacing dispatch hands these to `store/lua/enqueue.lua`, which puts the holder's
    id and token in between, so the holder keeps its id while taking this body (its "tok"
    field moves next to "id"; JSON does not care about the order). The token is found
    from the end: it comes after the payload, whose text may contain anything.
    """
    head = f'{{"v":{WIRE_VERSION},"id":'
    start = head + wire.encode(message.id) + ","
    token_field = f',"tok":"{message.dispatch_token}"'
    at = body.rfind(token_field)
    if not body.startswith(start) or message.dispatch_token is None or at < 0:
        raise ValueError("not the wire form of this message")
    return head, body[len(start):at] + body[at + len(token_field):]


# Stand-ins for the id and payload while a batch's shared envelope is encoded, and
# their JSON (what is split out of the envelope).
_ID_MARK, _PAYLOAD_MARK = "\x01id\x01", "\x01payload\x01"
_ID_JSON, _PAYLOAD_JSON = wire.encode(_ID_MARK), wire.encode(_PAYLOAD_MARK)


def batch_bodies(messages: Sequence[TaskMessage]) -> list[str]:
    """The wire forms of messages alike but for their hex ids and payloads (one
    `dispatch_many` batch): each the text `to_json` gives, with the same checks, but
    the envelope is encoded once and per message only its payload, about half the
    encoding work."""
    envelope = replace(messages[0], id=_ID_MARK, payload=_PAYLOAD_MARK).to_json()
    if envelope.count(_ID_JSON) != 1 or envelope.count(_PAYLOAD_JSON) != 1:
        return [message.to_json() for message in messages]  # a name holds a mark
    head, rest = envelope.split(_ID_JSON)
    middle, tail = rest.split(_PAYLOAD_JSON)
    bodies = []
    for message in messages:
        if not message.id.isalnum():  # it would need escaping: the long way
            bodies.append(message.to_json())
            continue
        try:
            payload = wire.encode(message.payload)
        except (TypeError, ValueError, RecursionError):
            message.to_json()  # raises the error that names the task
            raise
        body = f'{head}"{message.id}"{middle}{payload}{tail}'
        if not _plainly_valid(body):
            message._check_text(body)
        bodies.append(body)
    return bodies
