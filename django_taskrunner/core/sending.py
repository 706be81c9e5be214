"""A prepared message put on its queue: on its stream now, in its delayed set for later,
or a batch of them, each with its claim (lock, task_id) and task record in the same
round trip; then the queue announced in the known queues.

A plain add is one XADD: one round trip, nothing else on the hot path. A unique or
`task_id` one is one EVALSHA that takes the lock and adds the message together (see
`unique.py`, and `store/locks.py` for the commands). A delayed one is one script too:
ZADD, and a PUBLISH that wakes the scheduler when it is due before every waiting entry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django_taskrunner.conf import on_reset
from django_taskrunner.core import clock, sharding
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.records import dispatch_record, dispatch_records, keeps_records
from django_taskrunner.core.unique import UniqueClaim
from django_taskrunner.exceptions import RedisUnavailable, TaskAlreadyDispatched
from django_taskrunner.store import entries, get_store, keys
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, unavailable
from django_taskrunner.store.fair import UNKEYED
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.store.streams import Broker

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task


def claim_level(claim: UniqueClaim, message: TaskMessage) -> str:
    """The stream a claimed message goes to: its shard's, or its priority level's there."""
    return keys.level_name(claim.shard, message.priority)


def debounce_ms(claim: UniqueClaim | None) -> int | None:
    """The quiet period of a debounced dispatch, else None."""
    return None if claim is None or claim.lock is None else claim.lock.debounce_ms


logger = logging.getLogger(__name__)


# (prefix, queue) this process has announced in the known queues, and when (monotonic s).
_announced: dict[tuple[str, str], float] = {}
# A queue is announced again after this long, so the leader sees it is still in use.
ANNOUNCE_EVERY_S = 3600.0


@on_reset
def _forget_announced() -> None:
    _announced.clear()


def announce_queue(broker: Broker, queue: str) -> None:
    """Add `queue` to the known queues (`keys.queues_seen_key`, `queues_used_key`), so
    the dashboard, `runtasks`' default queues and the leader's promotions know a queue
    used only through `dispatch(queue=...)`: one round trip on the first dispatch, and
    again an hour later (so the leader does not forget it), none in between."""
    last = _announced.get((broker.prefix, queue))
    now = clock.monotonic()
    if last is not None and now - last < ANNOUNCE_EVERY_S:
        return
    try:
        broker.store.schedule.add_known_queues([queue], clock.now_ms(), used=True)
    except REDIS_DOWN:
        return  # the next dispatch tries again
    _announced[(broker.prefix, queue)] = now


# (prefix, shard or level) -> (whether it is a fair queue, until when that holds, monotonic s).
_fair_queues: dict[tuple[str, str], tuple[bool, float]] = {}
# How long a look at a queue's fair mark holds: a plain queue pays one EXISTS per this.
FAIR_LOOK_EVERY_S = 2.0


@on_reset
def _forget_fair_queues() -> None:
    _fair_queues.clear()


def fair_queue(broker: Broker, shard: str) -> bool:
    """Whether `shard` (a level name) is a fair queue, whose tasks without a key wait as
    one more turn (store/fair.py, UNKEYED); looked up at most every FAIR_LOOK_EVERY_S
    per process, so a queue that another process made fair is seen within that time
    (one this process made fair, at once)."""
    now = clock.monotonic()
    seen = _fair_queues.get((broker.prefix, shard))
    if seen is not None and now < seen[1]:
        return seen[0]
    found = broker.store.fair.is_fair_queue(shard)
    _fair_queues[(broker.prefix, shard)] = (found, now + FAIR_LOOK_EVERY_S)
    return found


def redis_down(task: Task, exc: Exception) -> RedisUnavailable:
    return unavailable(f"cannot dispatch {task.name!r}", exc, built_client())


def add_now(message: TaskMessage, claim: UniqueClaim | None, task: Task) -> TaskMessage:
    """Put `message` on its stream (the one immediate add path), taking its unique lock /
    task_id in the same script when it has a `claim`, its record in the same round trip.
    Returns the message the dispatch gives back (the holder's, under on_conflict
    "return").

    A plain message (`TaskMessage.is_plain`) of a task that keeps records goes without
    its id: its task id is its stream entry's (`entries.entry_task_id`), the dispatch is
    one XADD, and its record is written by the worker that starts it (`lookup()` reads
    the entry meanwhile). Not on a cluster, where the record and the entry live in
    different slots, which no script can read together; nor in a fair queue, whose
    turns hold messages off the stream."""
    # Encoded (and checked) before anything reaches Redis: bad input fails the same way
    # whether Redis answers or not.
    named = claim is None and message.is_plain() and keeps_records(task)
    body = message.to_json_without_id() if named else message.to_json()
    try:
        broker = get_store().streams
        if named and broker.records.clustered:
            named, body = False, message.to_json()
        if claim is None:
            add_unclaimed(broker, message, body, named, task)
        elif message.fair_key is not None or fair_queue(broker, claim_level(claim, message)):
            # through the delayed set, due now: its promotion joins the turn
            return add_delayed(message, clock.now_ms(), claim, task)
        else:
            reply = get_store().locks.add_reserved(
                locks.reservation_for(claim, broker, message, body),
                dispatch_record(message, task, claim_level(claim, message), claim=claim))
            message = claim.settle(reply, message)
    except REDIS_DOWN as exc:
        raise redis_down(task, exc) from exc
    announce_queue(broker, message.queue)
    return message


def add_unclaimed(broker: Broker, message: TaskMessage, body: str, named: bool,
                  task: Task) -> None:
    """`add_now` of a message that claims nothing: onto its stream (its `body` without
    its id when `named`: its task id is then its entry's), or into its fair key's turn."""
    shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
    if message.fair_key is not None or fair_queue(broker, shard):
        # it waits for its key's turn (store/fair.py), or the unkeyed one
        record = dispatch_record(message, task, shard)
        add_fair(broker, shard, [message], [message.to_json() if named else body],
                 [record] if record else [])
    elif named:
        stream_id = broker.add(shard, body)
        message.id = entries.entry_task_id(shard, stream_id)
        message.stream_id = stream_id
    else:
        message.stream_id = broker.add(shard, body, dispatch_record(message, task, shard))


def add_delayed(
    message: TaskMessage, due_ms: int, claim: UniqueClaim | None = None, task: Task | None = None,
) -> TaskMessage:
    """Put `message` in its queue's delayed set until `due_ms` (the one delayed add path),
    taking its unique lock / task_id in the same script when it has a `claim`; with its
    `task`, the task's record ("delayed") goes in the same round trip. Returns the
    message the dispatch gives back (the holder's, under on_conflict "return")."""
    body = message.to_json()
    try:
        broker = get_store().streams
        if claim is None:
            shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
            record = None if task is None else dispatch_record(message, task, shard, due_ms)
            broker.add_delayed(shard, body, due_ms, record)
        else:
            reservation = locks.reservation_for(claim, broker, message, body, due_ms)
            record = None if task is None else dispatch_record(
                message, task, claim_level(claim, message), due_ms, claim)
            message = claim.settle(get_store().locks.add_reserved(reservation, record), message)
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot dispatch {message.task_name!r}", exc,
                          built_client()) from exc
    announce_queue(broker, message.queue)
    return message


def add_batch(
    task: Task, prepared: list[tuple[TaskMessage, UniqueClaim | None]]
) -> list[TaskMessage]:
    """Prepared messages of one task in one round trip (`dispatch_many`): each claimed one
    through its own pipelined script, else every body XADDed; the messages queued."""
    bodies = [message.to_json() for message, _claim in prepared]
    # One task with one set of options: either every payload claims a lock or none does.
    claimed = [(message, claim, body)
               for (message, claim), body in zip(prepared, bodies, strict=True) if claim]
    try:
        broker = get_store().streams
        if claimed:
            return add_claimed(broker, task, claimed)
        stream_ids = add_plain(broker, task, [message for message, _ in prepared], bodies)
    except REDIS_DOWN as exc:
        raise redis_down(task, exc) from exc
    for (message, _claim), stream_id in zip(prepared, stream_ids, strict=True):
        message.stream_id = stream_id or None  # None: waiting for its fair key's turn
    return [message for message, _claim in prepared]


def add_plain(
    broker: Broker, task: Task, messages: list[TaskMessage], bodies: list[str]
) -> list[str]:
    """XADD every body (and its record) in one round trip; a queue split into shards
    gets them round robin."""
    queue, priority = messages[0].queue, messages[0].priority
    shards = sharding.spread(queue, len(bodies))
    if priority is not None:
        shards = [keys.level_name(shard, priority) for shard in shards]
    if any(message.fair_key is not None for message in messages) or any(
            fair_queue(broker, shard) for shard in set(shards)):
        return add_fair_batch(broker, task, messages, bodies)
    records = dispatch_records(messages, task, shards) if keeps_records(task) else []
    if sharding.shard_count(queue) == 1:
        return broker.add_many(shards[0], bodies, records)
    return broker.add_each(list(zip(shards, bodies, strict=True)), records)


def add_fair(broker: Broker, shard: str, messages: list[TaskMessage], bodies: list[str],
             records: list[RecordWrite]) -> None:
    """Messages of one fair key (and weight) into the key's list of `shard`, with their
    records, in one round trip; they reach the stream in the key's turns."""
    first = messages[0]
    broker.store.fair.push(shard, first.fair_key or UNKEYED,
                                            first.fair_weight or 1, bodies, records)
    if first.fair_key is not None:  # it marked the queue fair: no need to look
        _fair_queues[(broker.prefix, shard)] = (True, clock.monotonic() + FAIR_LOOK_EVERY_S)


def add_fair_batch(
    broker: Broker, task: Task, messages: list[TaskMessage], bodies: list[str],
) -> list[str]:
    """`dispatch_many` of a task with fair keys or on a fair queue: plain messages (no
    key) XADDed as usual, or, on a fair queue, into the unkeyed turn's list; the others
    into their keys' lists (one round trip per key); the stream ids ('' for a message
    waiting for its turn)."""
    groups: dict[tuple[str, int, str | None], list[int]] = {}
    for index, message in enumerate(messages):
        shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
        groups.setdefault((shard, message.fair_weight or 1, message.fair_key), []).append(index)
    stream_ids = [""] * len(messages)
    for (shard, _weight, fair_key), indexes in groups.items():
        chosen = [messages[i] for i in indexes]
        records = [record for message in chosen
                   if (record := dispatch_record(message, task, shard)) is not None]
        if fair_key is None and not fair_queue(broker, shard):
            ids = broker.add_many(shard, [bodies[i] for i in indexes], records)
            for index, stream_id in zip(indexes, ids, strict=True):
                stream_ids[index] = stream_id
        else:
            add_fair(broker, shard, chosen, [bodies[i] for i in indexes], records)
    return stream_ids


def add_claimed(
    broker: Broker, task: Task, claimed: list[tuple[TaskMessage, UniqueClaim, str]]
) -> list[TaskMessage]:
    """One enqueue script per message, pipelined; the messages whose claim was free."""
    now = clock.now_ms()
    due = [(now if message.fair_key is not None  # a fair one, or of a fair queue: see add_now
            or fair_queue(broker, claim_level(claim, message)) else None)
           if (quiet_ms := debounce_ms(claim)) is None else now + quiet_ms
           for message, claim, _body in claimed]
    replies = get_store().locks.add_reserved_many(
        [locks.reservation_for(claim, broker, message, body, due_ms)
         for (message, claim, body), due_ms in zip(claimed, due, strict=True)],
        [dispatch_record(message, task, claim_level(claim, message), due_ms, claim=claim)
         for (message, claim, _body), due_ms in zip(claimed, due, strict=True)])
    queued = []
    for (message, claim, _body), reply in zip(claimed, replies, strict=True):
        try:
            message = claim.settle(reply, message)
        except TaskAlreadyDispatched as exc:
            logger.info("dispatch_many: skipped a duplicate of task=%s: lock %s is held by %s",
                        exc.task_name, exc.lock_key, exc.holder_id)
            continue
        queued.append(message)
    return queued
