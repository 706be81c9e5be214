from __future__ import annotations

import random

from django_taskrunner.store import keys
from django_taskrunner.worker.steps import CAP_SECONDS, default_backoff


def test_every_queue_key_carries_the_queue_as_hash_tag():
    assert keys.stream_key("tr", "emails") == "tr:{emails}:stream"
    assert keys.delayed_key("tr", "emails") == "tr:{emails}:delayed"
    assert keys.stats_key("tr", "emails") == "tr:{emails}:stats"
    assert keys.task_id_key("tr", "emails", "abc") == "tr:{emails}:id:abc"
    assert keys.unique_key("tr", "emails", "shop.send", "order-1") == (
        "tr:{emails}:unique:shop.send:order-1")
    assert keys.unique_key("tr", "emails", "shop.send", "") == "tr:{emails}:unique:shop.send"
    assert keys.leader_key("tr", "workers") == "tr:leader:workers"


def test_default_backoff_doubles_with_jitter_and_is_capped():
    rand = random.Random(1)
    for retry, ceiling in ((1, 1), (2, 2), (3, 4), (4, 8)):
        delays = [default_backoff(retry, rand=rand) for _ in range(200)]
        assert min(delays) >= ceiling / 2
        assert max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling / 10  # jitter spreads them
    assert default_backoff(50, rand=rand) <= CAP_SECONDS
