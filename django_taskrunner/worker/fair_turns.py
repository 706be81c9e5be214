"""The fetcher's side of fair queues: before each read of a shard that has fair tasks
waiting, move about the reader's free room of them onto the shard's streams, in turns
across keys (`store/fair.py`, `fair_feed.lua`). Turns are kept in Redis, so they are
global across every worker and process, and the streams hold only what is about to run.

A shard that never had a fair task costs one pipelined EXISTS of its rings when the
reader starts and every `LOOK_EVERY` seconds after, as priority levels are found.
"""

from __future__ import annotations

from django_taskrunner.core import clock
from django_taskrunner.store.fair import Fair

# Seconds between two looks for the fair rings of a shard's levels.
LOOK_EVERY = 2.0


class FairTurns:
    """The fair rings of one shard (a queue or one of its shards), fed before reads."""

    def __init__(self, fair: Fair, shard: str) -> None:
        self.fair = fair
        self.shard = shard
        self.rings: list[str] = []
        self._look_at = 0.0

    def feed(self, room: int, streams: list[str]) -> bool:
        """Move up to `room` waiting fair tasks onto their streams, highest level first;
        True when one went to a level stream not in `streams` (the reader then looks
        for its levels at once)."""
        now = clock.monotonic()
        if now >= self._look_at:
            self._look_at = now + LOOK_EVERY
            self.rings = self.fair.rings_in_use(self.shard)
        new_level = False
        for level in self.rings:
            if room <= 0:
                break
            moved = self.fair.feed(level, room)
            if moved:
                room -= moved
                new_level = new_level or level not in streams
            else:  # its ring emptied: look again at the next turn of LOOK_EVERY
                self.rings = [ring for ring in self.rings if ring != level]
        return new_level
