"""`TaskMessage`: what travels on a stream, and its versioned JSON wire format.

A stream entry has one field, `m`, holding a JSON object. Readers tolerate unknown
fields and fill missing optional ones with defaults, so messages written by an older
or newer release still decode. Only `v`, `id` and `task` are required.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django_taskrunner.exceptions import InvalidTaskPayload

WIRE_VERSION = 1
FIELD = b"m"
# Largest wire version this release reads; newer ones are refused clearly.
_READABLE_VERSIONS = frozenset({1})
# One encoder for every message: json.dumps() with options builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


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
        try:
            return _encode(data)
        except (TypeError, ValueError) as exc:
            raise InvalidTaskPayload(
                f"payload of task {self.task_name!r} is not JSON-serialisable: {exc}",
                task_name=self.task_name,
            ) from exc

    @classmethod
    def from_json(cls, raw: bytes | str, *, stream_id: str | None = None) -> TaskMessage:
        """Decode a wire message; anything malformed raises `InvalidTaskPayload`."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidTaskPayload(f"message is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidTaskPayload(f"message is JSON {type(data).__name__}, not an object")
        version = data.get("v")
        if version not in _READABLE_VERSIONS:
            raise InvalidTaskPayload(f"message has wire version {version!r}; this release reads 1")
        try:
            message = cls(
                id=_text(data, "id"),
                task_name=_text(data, "task"),
                queue=str(data.get("queue") or ""),
                payload=data.get("payload"),
                attempt=int(data.get("attempt", 1)),
                dispatched_at_ms=int(data.get("ts", 0)),
                lock_key=data.get("lock"),
                unique_mode=data.get("mode"),
                has_task_id=bool(data.get("tid", False)),
                expires_at_ms=None if data.get("exp") is None else int(data["exp"]),
                reservation_timeout_ms=_positive_int_or_none(data.get("rt")),
                stream_id=stream_id,
            )
        except (TypeError, ValueError) as exc:
            raise InvalidTaskPayload(f"message has a field of the wrong type: {exc}") from exc
        task_name = message.task_name
        if message.attempt < 1:
            raise InvalidTaskPayload("message attempt must be >= 1", task_name=task_name)
        return message


def _positive_int_or_none(value: Any) -> int | None:
    """An advisory number: a bad value is ignored (the worker's default applies), not fatal."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidTaskPayload(f"message field {key!r} is missing or not a non-empty string")
    return value

