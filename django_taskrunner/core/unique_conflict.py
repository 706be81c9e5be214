"""What a unique dispatch hands the enqueue script for a held lock: its conflict policy.

Under on_conflict "raise" a held lock only refuses the dispatch. Under "return" the
script reads the holder's body, and under "replace" (and a debounce) it swaps the
holder's payload in when the holder has not started: for that it needs the queue's
other structure (the delayed set of a stream dispatch, or the stream of a delayed one),
the consumer group, and the new body cut around its id (`message.holder_parts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_taskrunner.core.message import TaskMessage, holder_parts
from django_taskrunner.store import keys
from django_taskrunner.store.locks import Reservation

if TYPE_CHECKING:
    from django_taskrunner.core.unique import Claim
    from django_taskrunner.store.broker import Broker


@dataclass(frozen=True)
class Conflict:
    """What enqueue.lua needs to act on a held lock for "return" or "replace": the
    queue's other structure, the consumer group, and the body cut around its id."""

    other: str
    group: str
    head: str = ""
    rest: str = ""


def conflict_for(
    claim: Claim, message: TaskMessage, body: str, other: str, group: str,
) -> Conflict | None:
    """The `Conflict` of a claim whose policy is not "raise", else None."""
    if claim.policy == "raise":
        return None
    head, rest = holder_parts(body, message) if claim.policy != "return" else ("", "")
    return Conflict(other, group, head, rest)


def reservation_for(
    claim: Claim, broker: Broker, message: TaskMessage, body: str, due_ms: int | None = None,
) -> Reservation:
    """The claim's reservation on `broker`: to the stream (`due_ms` None) or the delayed
    set, with what a held lock needs under the claim's policy."""
    level = keys.level_name(claim.shard, message.priority)  # the shard's, unless a priority
    stream = broker.stream(level)
    delayed = keys.delayed_key(broker.prefix, level)
    if due_ms is None:
        destination, other, wake = stream, delayed, ""
    else:
        destination, other, wake = delayed, stream, keys.wake_channel(broker.prefix, claim.shard)
    conflict = conflict_for(claim, message, body, other, broker.group)
    return claim.reservation(destination, body, due_ms, wake, conflict)
