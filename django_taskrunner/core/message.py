"""`TaskMessage`: what travels on a stream, and its versioned JSON wire format, read back
strictly.

A stream entry has one field, `m`, holding a JSON object. Readers tolerate unknown
fields and fill missing optional ones with defaults, so messages written by an older
or newer release still decode. Only `v`, `id` and `task` are required.

Whatever an entry holds, `from_json` returns a message whose every field has the type
and range the worker relies on, or raises `InvalidTaskPayload` naming the field and the
task: never another error, so no entry can stop the worker or the reclaimer. The same
limits apply when a message is encoded (`to_json`, on every dispatch path): a payload
nested more than `PAYLOAD_MAX_DEPTH` levels, a message over `MESSAGE_MAX_BYTES` of UTF-8
JSON, or text that is not valid Unicode (a lone surrogate) is refused before it reaches
Redis. The decoder and the check of each field come first below, `TaskMessage` after.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django_taskrunner.core.options import UNIQUE_MODES
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.store import keys

WIRE_VERSION = 1
# A plain dispatch's message, whose task id names its stream entry (`entries.entry_task_id`):
# version 1 without "id". Every reader of a stream entry puts the id in first
# (`store/entries.py` `entry_body`), so a decoded message has its id whatever its version; a
# release older than the one that wrote it refuses it (upgrade workers first).
WIRE_VERSION_WITHOUT_ID = 2
# What a reader adds to a message without its id, at most: `"id":"<stream id>@<stream>",`
# (a stream id of two 20-digit numbers, a level name of a 100-character queue). A
# message's size limit counts it, so the message a worker reads is within the limit too.
ENTRY_ID_ROOM = 160
# The wire versions this release reads; others are refused clearly.
READABLE_VERSIONS = frozenset({WIRE_VERSION, WIRE_VERSION_WITHOUT_ID})
# One encoder for every message: json.dumps() with options builds a new one per call.
encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
# A dispatch token (wire key "tok"): letters and digits, so it never contains the "#" that
# joins it to the id in a lock's value (locks.holder_value).
DISPATCH_TOKEN = re.compile(r"[A-Za-z0-9]{1,64}")

# Limits of what a message may carry (docs/tasks.md, "Payload limits"). Lists and objects
# nested deeper than this are refused: far below the depth at which Python's JSON
# functions raise RecursionError (about 990), and deeper than any real payload.
PAYLOAD_MAX_DEPTH = 100
# The whole message (payload plus a small envelope) as UTF-8 JSON. Redis holds every
# queued message in memory: pass large data by reference (a key, a path, a URL).
MESSAGE_MAX_BYTES = 4 * 1024 * 1024
# Bounds of the numbers a message carries: epoch ms up to 9999-12-30 UTC (a datetime
# shows it in any time zone), and attempt counts no task reaches.
MAX_EPOCH_MS = 253_402_128_000_000
MAX_ATTEMPT = 1_000_000_000
MESSAGE_ID_MAX_LENGTH = 255  # FailedTask.message_id
# A JSON escape of a UTF-16 surrogate: the only way valid UTF-8 can decode to one.
# A W3C traceparent (version 00 or later): a bad one is ignored, never fatal.
TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_CONTAINERS = (dict, list, tuple)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


# Rejects NaN, Infinity and numbers too large for a float (1e400), which JSON cannot
# carry on: the worker could not encode them again for a retry.
_decoder = json.JSONDecoder(parse_float=_finite_float, parse_constant=_refuse_constant)


def nested_too_deep(value: Any, limit: int = PAYLOAD_MAX_DEPTH) -> bool:
    """True when lists/objects in `value` nest more than `limit` levels (or form a cycle).

    Iterative and depth first, so neither a deep value nor a cycle can exhaust the stack.
    """
    if not isinstance(value, _CONTAINERS):
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1))
    return False


def could_nest_past(text: bytes | str, limit: int = PAYLOAD_MAX_DEPTH) -> bool:
    """False when JSON `text` holds too few brackets to nest more than `limit` levels.

    Every level needs its own "[" or "{", so counting them (in C, strings included)
    spares walking the decoded value on the hot paths; only a body that holds more
    brackets than `limit` is walked (`nested_too_deep`).
    """
    if isinstance(text, str):
        return text.count("[") + text.count("{") > limit
    data = text if isinstance(text, bytes) else bytes(text)
    return data.count(b"[") + data.count(b"{") > limit


def load(raw: bytes | str) -> dict[str, Any]:
    """The JSON object of a body: size, UTF-8, syntax, nesting and Unicode checked."""
    if isinstance(raw, str):
        text = raw
        try:
            size = len(raw) if raw.isascii() else len(raw.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidTaskPayload("message holds a lone surrogate, which is not text"
                                     ) from None
    else:
        size = len(raw)
    if size > MESSAGE_MAX_BYTES:
        raise InvalidTaskPayload(
            f"message is {size} bytes, over the limit of {MESSAGE_MAX_BYTES}")
    if not isinstance(raw, str):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidTaskPayload(f"message is not UTF-8 text: {exc}") from None
    try:
        data = _decoder.decode(text)
    except RecursionError:
        raise InvalidTaskPayload("message is nested too deeply to decode") from None
    except ValueError as exc:
        raise InvalidTaskPayload(f"message is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidTaskPayload(f"message is JSON {type(data).__name__}, not an object")
    if _has_lone_surrogate(text, data):
        raise InvalidTaskPayload("message holds a lone surrogate, which is not text")
    return data


def _has_lone_surrogate(text: str, data: dict[str, Any]) -> bool:
    """Strict UTF-8 has no surrogates, but a JSON escape (\\udcff) makes one."""
    # Rare: then check what the escapes made. The substring test is the fast path of the
    # regex's search (most bodies hold no escape at all).
    if "\\u" not in text or not _SURROGATE_ESCAPE.search(text):
        return False
    if nested_too_deep(data, PAYLOAD_MAX_DEPTH + 1):
        return False  # refused for its depth; encoding it again could exhaust the stack
    try:
        encode(data).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def short(value: Any) -> str:
    """A repr short enough for an error message, whatever the value."""
    text = repr(value) if not isinstance(value, _CONTAINERS) else type(value).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _wrong(key: str, what: str, value: Any, task_name: str | None) -> InvalidTaskPayload:
    task = f" of task {task_name!r}" if task_name else ""
    return InvalidTaskPayload(f"message{task}: field {key!r} must be {what}, not {short(value)}",
                              task_name=task_name)


def text_field(data: dict[str, Any], key: str, task_name: str | None, *,
          max_length: int | None = None) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or (max_length and len(value) > max_length):
        limit = f" of at most {max_length} characters" if max_length else ""
        raise _wrong(key, f"a non-empty string{limit}", value, task_name)
    return value


def optional(data: dict[str, Any], key: str, kind: type, what: str,
              task_name: str | None) -> Any:
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        raise _wrong(key, what, value, task_name)
    return value


def number(data: dict[str, Any], key: str, task_name: str | None, low: int, high: int,
            default: int | None = None) -> Any:
    """An integer field within [low, high]; a float with an integral value is accepted."""
    value = data.get(key)
    if value is None:
        return default
    number = value
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    if type(number) is not int or not low <= number <= high:
        raise _wrong(key, f"an integer from {low} to {high}", value, task_name)
    return number


def advisory_ms(value: Any) -> int | None:
    """An advisory number (`rt`): a bad one is ignored and the worker's default applies,
    since the task can run all the same; a fraction of a millisecond is dropped."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if 1 <= value <= MAX_EPOCH_MS else None


def flag(data: dict[str, Any], key: str, task_name: str | None) -> bool:
    value = data.get(key, False)
    if type(value) is not bool:
        raise _wrong(key, "true or false", value, task_name)
    return value


def lock(data: dict[str, Any], task_name: str | None) -> str | None:
    value = data.get("lock")
    if value is not None and (not isinstance(value, str) or not value):
        raise _wrong("lock", "a lock key (a non-empty string)", value, task_name)
    return value


def mode(data: dict[str, Any], task_name: str | None) -> str | None:
    value = data.get("mode")
    if value is not None and value not in UNIQUE_MODES:
        raise _wrong("mode", f"one of {', '.join(UNIQUE_MODES)}", value, task_name)
    return value


def dispatch_token(value: Any, task_name: str | None) -> str | None:
    """The dispatch token, or None when absent; anything but letters and digits is refused."""
    if value is None:
        return None
    if not isinstance(value, str) or not DISPATCH_TOKEN.fullmatch(value):
        raise _wrong("tok", "1 to 64 letters or digits", value, task_name)
    return value


def traceparent(value: Any) -> str | None:
    """The trace context (`tc`), or None: one that is not a traceparent is ignored, as the
    task runs just the same (only outside the dispatch's trace)."""
    if isinstance(value, str) and TRACEPARENT.fullmatch(value) and not value.startswith("ff"):
        return value
    return None


def fair_key(value: Any, task_name: str | None) -> str:
    """The fair key (`fk`): a non-empty string of at most 256 characters; the worker
    builds a key name from it, so anything else is refused."""
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        raise _wrong("fk", "a fair key", value, task_name)
    return value


def workflow_field(value: Any, task_name: str | None) -> dict[str, Any] | None:
    """The workflow field (`wf`): its id, member and stage indexes, the next stage's
    shards; anything else is refused, since the worker builds key names from it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _wrong("wf", "a workflow object", value, task_name)
    workflow_id, member, stage = value.get("id"), value.get("j"), value.get("k")
    shards = value.get("nx", [])
    relative = value.get("xr", 0)
    if type(relative) is not int or not 0 <= relative <= MAX_EPOCH_MS:
        raise _wrong("wf", "a workflow object whose xr is an integer of ms", value, task_name)
    if (not isinstance(workflow_id, str) or not DISPATCH_TOKEN.fullmatch(workflow_id)
            or type(member) is not int or type(stage) is not int or member < 0 or stage < 0
            or not isinstance(shards, list)
            or not all(isinstance(shard, str) and shard for shard in shards)):
        raise _wrong("wf", "a workflow object (id, j, k, nx)", value, task_name)
    return value


# The fields of a message dispatched with no option: `from_json` reads the optional
# ones (`read_options`) only when a message holds some other field.
PLAIN_KEYS = frozenset({"v", "id", "task", "queue", "payload", "attempt", "ts"})


def required(data: dict[str, Any]) -> tuple[str, str, str, int, int]:
    """The fields every message has, checked: (task name, id, queue, attempt, dispatch
    time in ms). The common shapes are checked inline (a plain int in range, or absent);
    anything else goes through the general checks, which accept or refuse it."""
    get = data.get
    version = get("v")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise InvalidTaskPayload(
            f"message has wire version {short(version)}; this release reads 1 and 2")
    task_name = get("task")
    if type(task_name) is not str or not task_name:
        task_name = text_field(data, "task", None)  # raises
    message_id = get("id")
    if type(message_id) is not str or not 0 < len(message_id) <= MESSAGE_ID_MAX_LENGTH:
        message_id = text_field(data, "id", task_name, max_length=MESSAGE_ID_MAX_LENGTH)
    queue = get("queue")
    if type(queue) is not str:
        queue = optional(data, "queue", str, "a string", task_name) or ""
    attempt = get("attempt", 1)
    if type(attempt) is not int or not 1 <= attempt <= MAX_ATTEMPT:
        attempt = number(data, "attempt", task_name, 1, MAX_ATTEMPT, default=1)
    dispatched_at_ms = get("ts", 0)
    if type(dispatched_at_ms) is not int or not 0 <= dispatched_at_ms <= MAX_EPOCH_MS:
        dispatched_at_ms = number(data, "ts", task_name, 0, MAX_EPOCH_MS, default=0)
    return task_name, message_id, queue, attempt, dispatched_at_ms

def check_payload(payload: Any, task_name: str) -> None:
    """Raise `InvalidTaskPayload` for a payload nested past `PAYLOAD_MAX_DEPTH`."""
    if nested_too_deep(payload):
        raise InvalidTaskPayload(
            f"payload of task {task_name!r} is nested more than {PAYLOAD_MAX_DEPTH} levels "
            f"deep (or contains itself)", task_name=task_name)


def _plainly_valid(text: str, room: int = 0) -> bool:
    """ASCII, within MESSAGE_MAX_BYTES (less `room`) and with too few brackets to nest
    too deep: the common message, which passes in a few C calls (anything else gets
    `_check_text`)."""
    return (text.isascii() and len(text) + room <= MESSAGE_MAX_BYTES
            and text.count("{") + text.count("[") <= PAYLOAD_MAX_DEPTH)


@functools.lru_cache(maxsize=1024)
def _json_text(value: str) -> str:
    """The JSON of a text a process sends again and again (a task name, a queue)."""
    return encode(value)


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
        return self._checked(self._wire_text)

    def to_json_without_id(self) -> str:
        """The wire form of a plain message (`is_plain`) without its id (version 2): what
        a plain dispatch adds, whose task id is then its entry's (`entries.entry_task_id`).
        The same checks as `to_json`."""
        if not self.is_plain():
            raise ValueError("only a plain message goes without its id")
        return self._checked(self._text_without_id, ENTRY_ID_ROOM)

    def _checked(self, build: Callable[[], str], room: int = 0) -> str:
        """The text `build` gives, checked: JSON, depth, Unicode, size (with `room` bytes
        left for what a reader adds)."""
        try:
            text = build()
        except RecursionError:
            check_payload(self.payload, self.task_name)  # raises: it is nested too deep
            raise
        except (TypeError, ValueError) as exc:
            check_payload(self.payload, self.task_name)  # a cycle: "contains itself"
            raise InvalidTaskPayload(
                f"payload of task {self.task_name!r} is not JSON-serialisable: {exc}",
                task_name=self.task_name,
            ) from exc
        if not _plainly_valid(text, room):
            self._check_text(text, room)
        return text

    def is_plain(self) -> bool:
        """None of the optional fields is set: a plain dispatch's message (a priority
        aside, which only chooses its stream)."""
        return (self.lock_key is None and not self.has_task_id and self.expires_at_ms is None
                and self.reservation_timeout_ms is None and self.dispatch_token is None
                and self.trace_context is None and self.workflow is None
                and self.fair_key is None and self.fair_weight is None
                and not self.ran_before and type(self.attempt) is int
                and type(self.dispatched_at_ms) is int)

    def _wire_text(self) -> str:
        """`encode(self._wire_fields())`; for a message with none of the optional fields
        (a plain dispatch's), the same text put together around its encoded payload, at
        a third of the cost (tests/unit/test_message.py compares the two)."""
        if self.priority is None and self.is_plain():
            message_id = self.id
            quoted = (f'"{message_id}"' if message_id.isascii() and message_id.isalnum()
                      else encode(message_id))  # a random id needs no escaping
            return (f'{{"v":{WIRE_VERSION},"id":{quoted},{self._plain_fields()}}}')
        return encode(self._wire_fields())

    def _text_without_id(self) -> str:
        """Version 2: the plain message's fields, and its priority if it has one."""
        level = "" if self.priority is None else f',"pr":{int(self.priority)}'
        return f'{{"v":{WIRE_VERSION_WITHOUT_ID},{self._plain_fields()}{level}}}'

    def _plain_fields(self) -> str:
        return (f'"task":{_json_text(self.task_name)},"queue":{_json_text(self.queue)},'
                f'"payload":{encode(self.payload)},"attempt":{self.attempt},'
                f'"ts":{self.dispatched_at_ms}')

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

    def _check_text(self, text: str, room: int = 0) -> None:
        """Refuse a payload nested too deep (walked only when the text holds enough
        brackets), text that is not valid Unicode, or over MESSAGE_MAX_BYTES as UTF-8
        (counting `room` bytes a reader adds: a task id put in, `ENTRY_ID_ROOM`)."""
        if could_nest_past(text):
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
        size += room
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
                f"message of task {self.task_name!r} names lock {short(self.lock_key)}, "
                f"which is not a unique lock of queue {queue!r}", task_name=self.task_name)

    @classmethod
    def from_json(cls, raw: bytes | str, *, stream_id: str | None = None) -> TaskMessage:
        """Decode a wire message; anything malformed raises `InvalidTaskPayload`.

        Checks every field the worker uses (type, range, finite numbers), the payload's
        depth, the size, and that the text is valid Unicode.
        """
        data = load(raw)
        task_name, message_id, queue, attempt, dispatched_at_ms = required(data)
        message = cls(id=message_id, task_name=task_name, queue=queue,
                      payload=data.get("payload"), attempt=attempt,
                      dispatched_at_ms=dispatched_at_ms, stream_id=stream_id)
        if not PLAIN_KEYS.issuperset(data):  # most messages hold no other field
            read_options(message, data)
        if could_nest_past(raw) and nested_too_deep(message.payload):
            raise InvalidTaskPayload(
                f"payload of task {task_name!r} is nested more than {PAYLOAD_MAX_DEPTH} "
                f"levels deep", task_name=task_name)
        if message.workflow is not None and "xr" in message.workflow:
            _expires_from_entry(message)
        return message


def read_options(message: TaskMessage, data: dict[str, Any]) -> None:
    """Set the optional fields of `message` that `data` holds, each checked; the others
    keep their defaults (a key this release does not know is ignored)."""
    get, task_name = data.get, message.task_name
    if "lock" in data:
        message.lock_key = lock(data, task_name)
    if "mode" in data:
        message.unique_mode = mode(data, task_name)
    if "tid" in data:
        message.has_task_id = flag(data, "tid", task_name)
    if "exp" in data:
        message.expires_at_ms = number(data, "exp", task_name, 0, MAX_EPOCH_MS)
    if "rt" in data:
        message.reservation_timeout_ms = advisory_ms(get("rt"))
    if "tok" in data:
        message.dispatch_token = dispatch_token(get("tok"), task_name)
    if "tc" in data:
        message.trace_context = traceparent(get("tc"))
    if "wf" in data:
        message.workflow = workflow_field(get("wf"), task_name)
    if "pr" in data:
        message.priority = number(data, "pr", task_name, 0, 9)
    if "fk" in data:
        message.fair_key = fair_key(get("fk"), task_name)
    if "fw" in data:
        message.fair_weight = number(data, "fw", task_name, 1, 1000)
    if "rb" in data:
        message.ran_before = flag(data, "rb", task_name)


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
    start = head + encode(message.id) + ","
    token_field = f',"tok":"{message.dispatch_token}"'
    at = body.rfind(token_field)
    if not body.startswith(start) or message.dispatch_token is None or at < 0:
        raise ValueError("not the wire form of this message")
    return head, body[len(start):at] + body[at + len(token_field):]


# Stand-ins for the id and payload while a batch's shared envelope is encoded, and
# their JSON (what is split out of the envelope).
_ID_MARK, _PAYLOAD_MARK = "\x01id\x01", "\x01payload\x01"
_ID_JSON, _PAYLOAD_JSON = encode(_ID_MARK), encode(_PAYLOAD_MARK)


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
            payload = encode(message.payload)
        except (TypeError, ValueError, RecursionError):
            message.to_json()  # raises the error that names the task
            raise
        body = f'{head}"{message.id}"{middle}{payload}{tail}'
        if not _plainly_valid(body):
            message._check_text(body)
        bodies.append(body)
    return bodies
