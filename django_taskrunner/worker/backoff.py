"""The default retry backoff: exponential with jitter. Pure, so tests can pin it."""

from __future__ import annotations

import random

BASE_SECONDS = 1.0
CAP_SECONDS = 600.0


def default_backoff(retry: int, *, rand: random.Random | None = None) -> float:
    """Seconds to wait before retry number `retry` (1 for the first retry).

    The delay doubles with each retry up to `CAP_SECONDS`, and "equal jitter" keeps
    it in [half, full] of that, so many tasks failing at once do not retry in step.
    """
    ceiling = min(CAP_SECONDS, BASE_SECONDS * 2 ** max(retry - 1, 0))
    uniform = (rand or random).uniform
    return ceiling / 2 + uniform(0, ceiling / 2)
