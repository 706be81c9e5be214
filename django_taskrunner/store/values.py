"""Plain values out of redis-py replies: the one bytes-to-text conversion of the store."""

from __future__ import annotations


def text(value: bytes | str, errors: str = "strict") -> str:
    """A reply as text: redis-py gives bytes (the client does not decode responses).

    `errors="replace"` for what is only shown (admin pages): a key or value some other
    program wrote need not be UTF-8.
    """
    return value.decode(errors=errors) if isinstance(value, bytes) else value
