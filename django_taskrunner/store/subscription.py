"""One pub/sub connection of its own: the scheduler's wake-ups (`keys.wake_channel`,
`keys.periodic_channel`) and the workers' cancel notices (`keys.cancel_channel`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from django_taskrunner.store.values import text


class WakeSubscription:
    """One pub/sub connection listening to wake channels (`keys.wake_channel`) and the
    periodic-change channel (`keys.periodic_channel`)."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    def subscribe(self, channels: list[str], timeout: float = 5.0,
                  monotonic: Callable[[], float] = time.monotonic) -> None:
        """SUBSCRIBE and wait for Redis to confirm each channel; a redis TimeoutError
        (one of `REDIS_DOWN`) when some are not confirmed within `timeout` seconds."""
        self.pubsub.subscribe(*channels)
        pending = set(channels)
        deadline = monotonic() + timeout
        while pending and monotonic() < deadline:
            message = self.pubsub.get_message(timeout=0.5)
            if message is not None and message.get("type") == "subscribe":
                pending.discard(text(message["channel"]))
        if pending:
            raise RedisTimeoutError(f"no confirmation of SUBSCRIBE {sorted(pending)}")

    def next_message(self, timeout: float) -> tuple[str, str] | None:
        """(channel, data) of the next published message within `timeout` seconds; None
        when none came (or only a subscription notice)."""
        message = self.pubsub.get_message(timeout=timeout)
        if message is None or message.get("type") != "message":
            return None
        data = message["data"]
        data = text(data, errors="replace") if isinstance(data, bytes | str) else str(data)
        return text(message["channel"]), data

    def close(self) -> None:
        """Close the connection; a broken one may fail to close, which is ignored."""
        try:
            self.pubsub.close()
        except Exception:  # noqa: S110 - closing a broken connection may fail again
            pass
