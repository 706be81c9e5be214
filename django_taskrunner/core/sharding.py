"""Which shard of a queue a message goes to (`TASKRUNNER["SHARDS"]`, key names in keys.py).

A queue split into N streams spreads one hot queue over N cluster slots, so N masters
share its writes and N readers per worker share its reads. A dispatch picks a shard:

- a unique task: by its lock (task name + unique key), so every duplicate meets the
  same lock, and lock and message share one slot (one script takes both);
- a task with a `task_id`: by the id, so a second dispatch of it meets the reservation;
- a periodic schedule: by the schedule, so its "last fired" mark stays in one shard;
- anything else: round robin, from a per-process counter that starts at random so that
  many short-lived processes do not all begin with shard 0.

The hash is CRC-32, the same in every process and every Python (not `hash()`, which is
salted per process). With SHARDS = 1 every function returns the queue name itself.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Iterable

from django_taskrunner.conf import get_settings
from django_taskrunner.store import keys

_turns = itertools.count(random.randrange(1 << 16))  # noqa: S311 - spreading, not secrecy


def shard_count(queue: str) -> int:
    """How many streams `queue` is split into."""
    setting = get_settings().SHARDS
    if isinstance(setting, int):
        return setting
    return setting.get(queue, 1)


def shards(queue: str) -> list[str]:
    """Every shard name of `queue`, in order (`[queue]` when it is not split)."""
    count = shard_count(queue)
    return [keys.shard_name(queue, index, count) for index in range(count)]


def all_shards(queues: Iterable[str]) -> list[str]:
    """Every shard name of every queue, queue by queue."""
    return [shard for queue in queues for shard in shards(queue)]


def shard_for(queue: str, key: str) -> str:
    """The shard that `key` (a lock identity, a task id...) always maps to."""
    count = shard_count(queue)
    if count == 1:
        return queue
    return keys.shard_name(queue, zlib.crc32(key.encode("utf-8")) % count, count)


def next_shard(queue: str) -> str:
    """The next shard in this process's round robin."""
    count = shard_count(queue)
    if count == 1:
        return queue
    return keys.shard_name(queue, next(_turns) % count, count)


def spread(queue: str, number: int) -> list[str]:
    """Shards for `number` messages of one batch, round robin."""
    count = shard_count(queue)
    if count == 1:
        return [queue] * number
    start = next(_turns)
    return [keys.shard_name(queue, (start + n) % count, count) for n in range(number)]
