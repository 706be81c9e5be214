"""Reading a message's JSON wire form: the limits, the decoder and the check of each
field, every one raising `InvalidTaskPayload` with a message that names the field and the
task (`core/message.py` `TaskMessage.from_json` calls them)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django_taskrunner.core.options import UNIQUE_MODES
from django_taskrunner.exceptions import InvalidTaskPayload

WIRE_VERSION = 1
# Largest wire version this release reads; newer ones are refused clearly.
READABLE_VERSIONS = frozenset({1})
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


def required(data: dict[str, Any]) -> tuple[str, str, str, int, int]:
    """The fields every message has, checked: (task name, id, queue, attempt, dispatch
    time in ms). The common shapes are checked inline (a plain int in range, or absent);
    anything else goes through the general checks, which accept or refuse it."""
    get = data.get
    version = get("v")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise InvalidTaskPayload(
            f"message has wire version {short(version)}; this release reads 1")
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
