"""Plain values out of redis-py replies: the one bytes-to-text conversion of the store."""

from __future__ import annotations


def text(value: bytes | str) -> str:
    """A reply as text: redis-py gives bytes (the client does not decode responses)."""
    return value.decode() if isinstance(value, bytes) else value
