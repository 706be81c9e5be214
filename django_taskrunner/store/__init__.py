"""Redis: the `Store`, every Redis command of the package behind one object.

A `Store` is one client and key prefix, with one attribute per kind of data; each
attribute is a small class of its own module here. Above the store, code gets it from
`get_store()` (one per settings, rebuilt after `conf.reset()`) and never builds the
classes itself (tests/unit/test_import_graph.py refuses that). The classes read no
settings: the store is handed the values it needs (consumer group, delete-on-ack,
the finished index's size and the results' TTL).
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.conf import get_settings, on_reset
from django_taskrunner.store.connection import get_redis
from django_taskrunner.store.fair import Fair
from django_taskrunner.store.inspect import Inspector, StreamBrowser
from django_taskrunner.store.keys import leader_key
from django_taskrunner.store.limits import Limits
from django_taskrunner.store.locks import UniqueLocks
from django_taskrunner.store.records import (
    FinishedIndex,
    FinishedLimits,
    Records,
    Results,
    StepsStore,
)
from django_taskrunner.store.rows import FailedRows, OutboxMarks
from django_taskrunner.store.schedule import Lease, Pauses, ScheduleStore
from django_taskrunner.store.server import RedisServer
from django_taskrunner.store.stats import StatsStore, WorkerDirectory
from django_taskrunner.store.streams import Broker
from django_taskrunner.store.workflows import WorkflowStore

DEFAULT_GROUP = "taskrunner"


class Store:
    """Every kind of data the package keeps in Redis, on one client and key prefix.

    Args:
        client: a redis-py client (one server or a cluster).
        prefix: the key prefix (`PREFIX`).
        group: the consumer group every worker shares (`CONSUMER_GROUP`).
        delete_on_ack: XDEL a message when it is acked (`DELETE_ON_ACK`).
        finished: what the finished index keeps (`FINISHED_LIST_SIZE`, `RESULT_TTL`).

    Every public method, as `attribute.method(args)  what it does` (kept in step with the
    classes by tests/unit/test_store_index.py):

    streams: `Broker` (store/streams.py), the queues' streams and delayed sets under one consumer
    group: add, read, ack, requeue, recover
        streams.ack(queue, stream_ids, pipe)  XACK (and XDEL when DELETE_ON_ACK) the given
            entries
        streams.add(queue, body, record)  XADD one message
        streams.add_delayed(queue, body, due_ms, record)  ZADD a message to the delayed set
        streams.add_each(entries, records)  XADD each (queue or shard, body) in one round trip
        streams.add_many(queue, bodies, records)  XADD many messages
        streams.adopt(queue, dead, alive, counters)  Move the entries `dead` still holds to
            `alive`, keeping their place, and their delivery counter or setting it
        streams.bodies(queue, stream_ids)  The body of each entry, None for one deleted from the
            stream
        streams.claim(queue, consumer, claims)  XCLAIM entries idle for at least their own
            timeout, keeping their delivery counter
        streams.clear_lost_mark(consumer)  A worker starting under `consumer`: drop an old mark
        streams.delete_idle_consumers(queue, min_idle_ms, keep)  Remove consumers holding
            nothing and idle for `min_idle_ms`
        streams.drop_consumer(queue, consumer)  Remove `consumer` from the group if it holds
            nothing
        streams.ensure_group(queue)  Create the consumer group (and the stream) unless they exist
        streams.forget(queue, stream_ids)  XACK entries deleted from the stream while pending:
            there is nothing to run
        streams.heartbeat(queue, consumer, stream_id)  Reset the idle time of an entry
            `consumer` holds
        streams.hold(queue, consumer, stream_ids, runs, pipe)  Heartbeat entries `consumer`
            still holds
        streams.hold_and_sync(consumer, held, writes, watched, renewals, buffered)
            `hold_many()`, with the running tasks' record writes
        streams.hold_many(consumer, held)  `hold()` for every queue of `held`
        streams.holders(queue)  (consumer, entries pending, ms since it last read or claimed) of
            each consumer of the group holding something
        streams.heartbeat_ages_ms(consumers, now_ms)  How long ago each worker wrote its
            heartbeat, by the server's clock
        streams.length(queue)  XLEN of the queue's stream
        streams.levels_in_use(shards)  Every stream of each shard, highest priority first
        streams.lost_mark(consumer)  Why `consumer` was declared lost; None when it was not
        streams.mark_lost(consumer, cause, ttl_s)  Say that `consumer` was declared lost
        streams.pending(queue)  Messages delivered to some worker and not yet acked
        streams.pending_idle(queue, min_idle_ms, start, count, consumer)  Pending entries idle
            for at least `min_idle_ms`, from `start` on
        streams.promote_due(queue, now_ms, batch)  Move up to `batch` due delayed messages to
            the stream, atomically, then give their records the new stream ids
        streams.read(queue, consumer, count, block_ms)  New messages for `consumer`
        streams.read_checked(queue, consumer, count, block_ms)  `read()`, and then the ids
            cancelled on this stream
        streams.read_checked_many(queues, consumer, count, block_ms)  `read_checked()` of
            several streams of one shard
        streams.requeue(queue, consumer, stream_id, body, due_ms, record)  Move a held entry
            back, with `body`, to the stream
        streams.settle(consumer, acks, requeues, record_writes, freed_slots, members_done)
            Write what the ended attempts leave, then ack and requeue entries
        streams.stream(queue)  The stream key of a queue, shard or priority level

    records: `Records` (store/records.py), task records: written at dispatch, by the worker,
    read by lookup/wait/cancel
        records.add(stream, body, write)  XADD one message and write its record (`record_add.lua`)
        records.answer_cancel(reply_key, answer)  A worker's answer to one `cancel()` call
        records.cancel(task_id, now_ms, ttl_s, terminate)  `record_cancel.lua`: flag the record
            cancelled unless it is finished
        records.cancel_entry(group, shard, stream_id, holder, running, releases, notice, ttl_s)
            `cancel_entry.lua` in the shard's slot: delete a message not delivered yet and free
            its keys
        records.cancelled_ids(task_ids, replies)  The ids whose `queue_flags` reply says they
            were cancelled
        records.cancelled_members(shard)  SMEMBERS of a shard's cancelled set
        records.enqueue_args(write)  The KEYS and ARGV `enqueue.lua` appends to write the record
            in its own step
        records.load(task_id)  HGETALL of the record of `task_id`
        records.load_or_entry(task_id, group)  The record, or for an id that names its
            stream entry with no record yet, that entry's body (`record_or_entry.lua`)
        records.promoted_entries(reply)  (task id, holder value, stream id) of each message
            `promote_due.lua` moved
        records.queue_adds(pipe, entries)  Queue `record_add.lua` on `pipe` for each message
        records.queue_cancelled(pipe, shard)  Queue SMEMBERS of a shard's cancelled set
        records.queue_flags(pipe, task_ids)  Queue HGET of each record's cancel flag on `pipe`
        records.queue_new(pipe, write)  Queue on `pipe` the first write of a record: HSET its
            fields, EXPIRE its TTL
        records.queue_writes(pipe, writes)  Queue `record_write.lua` for `writes` on `pipe`,
            `WRITE_BATCH` records per call on one server
        records.queue_saves(pipe, added)  Queue `save_new`'s calls on `pipe` (a batch that moves
            messages whose records may not exist yet)
        records.save_new(added)  Write new records after their XADD (`record_new.lua`, a cluster)
        records.set_stream_ids(moved)  Give moved messages' records their new stream ids
        records.subscription()  A pub/sub connection of its own, subscribed to nothing yet
        records.wait_answer(reply_key, timeout_s)  BLPOP the holding worker's answer to a
            `cancel()`
        records.wait_done(task_id, timeout_s)  Block up to `timeout_s` on the done list
        records.watch(task_id)  `record_watch.lua`: the record, marked watched unless final
        records.write(writes)  `queue_writes` in a pipeline of its own

    browse: `StreamBrowser` (store/inspect.py), the admin's reads of streams and delayed sets,
    and its purges
        browse.delayed_batch(queue, count)  The first `count` members of the delayed set
        browse.delayed_count(queue)  ZCARD of the queue's delayed set
        browse.entry(queue, stream_id)  The entry with this id
        browse.find_in_stream(queue, after, count, needle)  The ids of the `count` entries after
            `after` whose body holds `needle`, found on the server
        browse.group_state(queue)  XLEN, XPENDING (summary) and XINFO GROUPS of one stream
        browse.held(queue, after, count, consumer)  Up to `count` pending entries after `after`
        browse.holder_of(queue, stream_id)  The pending entry `stream_id`, if a worker holds it
        browse.last_id(queue)  The newest entry's id
        browse.purge_delayed(queue, items)  ZREM each member still in the delayed set and free
            its keys likewise
        browse.purge_stream(queue, items)  Delete each entry that still waits, freeing its keys
        browse.scan_delayed(queue, needle, limit)  Delayed-set members holding `needle` (ZSCAN)
        browse.stream(queue)  The stream key of a queue, shard or priority level
        browse.streams(shards)  The streams of `shards`: each shard's own and its priority
            levels in use, highest first
        browse.values(names)  The string value of each key
        browse.waiting_after(queue, after, count)  Up to `count` entries after stream id `after`
        browse.waiting_before(queue, before, floor, count)  Up to `count` entries before
            `before` and after `floor`

    inspect: `Inspector` (store/inspect.py), the figures' reads: groups, consumers, heartbeats,
    the leader
        inspect.consumers(stream, now_ms)  The group's consumers on `stream`
        inspect.leader()  GET and PTTL of the group's `keys.leader_key`
        inspect.leader_holder()  GET the group's `keys.leader_key`: who holds the lease, None if
            nobody
        inspect.minute_hashes(queue, minutes)  HGETALL of each epoch minute's `keys.minute_key`
        inspect.read_details(queue, after, workers, task_names)  A queue page's details, one
            round trip
        inspect.read_queue(queue, streams, now_ms)  XINFO GROUPS, XLEN and the stats of a queue
        inspect.recorded_queues()  The known queues: ZRANGE of `keys.queues_seen_key` and
            SMEMBERS of the older `keys.known_queues_key`
        inspect.worker_loads(workers)  (threads, busy) of each worker's heartbeat hash

    schedule: `ScheduleStore` (store/schedule.py), the delayed sets, periodic schedules and
    known queues (the leader's side)
        schedule.add_known_queues(names, now_ms, used)  ZADD queue names to
            `keys.queues_seen_key` at `now_ms`
        schedule.announce_periodic_change(now_ms)  PUBLISH `now_ms` on `keys.periodic_channel`:
            the leader rereads the schedules
        schedule.count_delayed(shards)  ZCARD of each shard's delayed set, pipelined
        schedule.delayed_at(shard, due_ms)  ZRANGEBYSCORE due_ms due_ms WITHSCORES: the entries
            due at exactly `due_ms`
        schedule.delayed_heads(shards, count)  The first `count` entries of each shard's delayed
            set
        schedule.delayed_range(shard, start, stop)  ZRANGE start stop WITHSCORES of a delayed set
        schedule.fire_periodic(shard, schedule_id, occurrence_ms, body, fair)
            `fire_periodic.lua`: send one occurrence of a schedule, once
        schedule.forget_queue(name, cutoff_ms)  `forget_queue.lua`: forget a queue unseen since
            `cutoff_ms`
        schedule.holds_messages(shards)  XLEN of each shard's stream and ZCARD of its delayed
            set
        schedule.known_queues()  Every known queue: the members of `keys.queues_seen_key` and of
            the older plain set `keys.known_queues_key`
        schedule.mark_schedules(schedules, now_ms)  For each (shard, schedule id): HSETNX its
            mark in `keys.periodic_key` to `now_ms` and HGET it, all pipelined
        schedule.queue_sightings()  Each known queue and when it was last seen
        schedule.scan_delayed(shard, match)  ZSCAN a delayed set with MATCH `match`, lazily
        schedule.subscription()  A new pub/sub connection, subscribed to nothing yet
        schedule.take_delayed(shard, due_ms, message_id, run)  take_delayed.lua: remove the
            entry due at `due_ms` whose id is `message_id`, and XADD it to the stream when `run`
        schedule.used_queues(since_ms)  ZRANGEBYSCORE of `keys.queues_used_key`: the queues a
            dispatch used since `since_ms`

    locks: `UniqueLocks` (store/locks.py), unique locks and task ids: reserve with the message,
    release, list
        locks.add_reserved(reservation, record)  Take the reservation and add its message
        locks.add_reserved_many(reservations, records, delete)  `add_reserved` for each,
            pipelined
        locks.inspect_many(locks)  GET, PTTL and the mode record of each (queue, lock key)
        locks.release(holder, actions)  `release_lock.lua`: per (key, action), only while held
        locks.release_lock(queue, lock_key, holder)  Free a lock and its mode record while held
        locks.scan_keys(node, cursor, match, count)  One SCAN MATCH `match` COUNT `count` on
            server `node`
        locks.scan_nodes()  How many servers a key scan walks: 1, or the primaries of a Redis
            Cluster

    finished: `FinishedIndex` (store/records.py), each queue's index of finished tasks (the
    admin's Tasks list)
        finished.count(queue)  ZCARD of `queue`'s finished index
        finished.list_task(queue, task_id, finished_ms, ttl_s)  `record_index.lua`: list a task
            no worker will write the final record of
        finished.page(queue, cursor, count, statuses, scan)  Up to `count` finished tasks of
            `queue`, newest first, from `cursor`

    results: `Results` (store/records.py), the Tasks framework backend's result records
        results.load(result_id)  GET the record of `result_id`
        results.save(result_id, record, ttl_seconds)  SET the record of `result_id` with EX
            `ttl_seconds`
        results.save_and_add(result_id, record, ttl_seconds, queue, body)  SET the record, then
            XADD `body` to the stream of `queue`

    limits: `Limits` (store/limits.py), rate and concurrency limits
        limits.inspect_many(limit_keys, now_ms)  What each limit holds at `now_ms`
        limits.queue_releases(pipe, slots)  Queue the release of each slot
        limits.queue_renewals(pipe, slots)  Queue the renewal of each slot's lease on a pipeline
        limits.release(slots)  Free slots now
        limits.slot_holders(key, now_ms)  The live holders of a concurrency limit
        limits.take_rate(key, limit, window_ms, task_id)  One start of `task_id` under the rate
            limit `key`, or how long to wait
        limits.take_slot(key, limit, holder, lease_ms, base_wait_ms, max_wait_ms)  A slot of the
            concurrency limit `key` for `holder`, or how long to wait

    workflows: `WorkflowStore` (store/workflows.py), chains and groups: the workflow hash, its
    members, their completion
        workflows.cancel(workflow_id, now_ms, ttl_s)  Cancel a workflow (`workflow_cancel.lua`)
        workflows.create(workflow_id, fields, member_ids, bodies, records, first, created_ms,
            ttl_s)  Write the workflow and its members' records, then send its first stage
        workflows.done(workflow_id, indexes)  SMISMEMBER: whether each member index was counted
            finished
        workflows.forget(workflow_ids)  ZREM from the index workflows whose keys expired
        workflows.load(workflow_id)  HGETALL of the workflow
        workflows.load_many(workflow_ids)  HGETALL of each workflow
        workflows.member_args(done)  KEYS and ARGV of `workflow_member.lua` for one finished
            member
        workflows.member_done(done)  `workflow_member.lua` for one member, in a round trip of
            its own
        workflows.members(workflow_id, start, stop)  LRANGE of the member ids from `start` to
            `stop`
        workflows.page(top_ms, count)  Workflow ids newest first, dispatched at or before
            `top_ms`
        workflows.queue_member_done(pipe, dones)  Queue `workflow_member.lua` for each finished
            member on `pipe`
        workflows.record_fields(task_ids, names)  HMGET `names` of each task's record

    fair: `Fair` (store/fair.py), fair queues: per-key lists taken in turns
        fair.count_shard(shard)  How many fair tasks of `shard` wait for their turn
        fair.feed(queue, count)  Move up to `count` waiting tasks of `queue` onto its stream, in
            turns across its keys
        fair.is_fair_queue(queue)  Whether a keyed task used `queue` lately
        fair.purge(queue)  Delete every fair list, the ring and the turns of `queue`
        fair.purge_shard(shard)  `purge` of every level of `shard` that has fair tasks waiting
        fair.push(queue, fair_key, weight, bodies, records)  Append one key's messages to its list
        fair.rings_in_use(shard)  The levels of `shard` that have fair tasks waiting
        fair.top_keys(queue, limit)  The keys of `queue` with the most waiting tasks
        fair.top_keys_of_queue(shards, limit)  The keys with most waiting tasks across `shards`
            and their levels, most first
        fair.waiting(queue, fair_key, start, count)  Bodies of one key's tasks waiting

    steps: `StepsStore` (store/records.py), the durable steps of a task (ctx.step)
        steps.holders(task_ids, ttl_seconds)  The ids that have kept steps, their TTL set
        steps.keep(task_id, name, value, ttl_seconds)  HSET one step, (re)set the TTL
        steps.load(task_id)  Every kept step of `task_id`: name -> JSON text

    stats: `StatsStore` (store/stats.py), worker figures and heartbeats, the long-queue gate
        stats.add_figures(writes, now_ms, window)  Add figures with no heartbeat
        stats.open_gate(queue, holder, cooldown_ms)  SET NX PX `keys.long_queue_gate_key`: True
            when this call set it
        stats.remove_heartbeat(consumer, queues)  DEL `keys.worker_key` and ZREM the consumer
            from each queue's `keys.queue_workers_key`
        stats.write_figures(writes, beat, now_ms, window, ttl, pipe)  Add figures, refresh a
            heartbeat

    workers: `WorkerDirectory` (store/stats.py), the Workers page's directory of heartbeats
        workers.forget_consumer(stream, group, consumer)  Remove `consumer` from `stream`'s
            group if it holds nothing
        workers.page(start, size)  Workers `start` to `start + size`, latest heartbeat first,
            with their hashes, and how many there are: two round trips

    pauses: `Pauses` (store/schedule.py), paused queues
        pauses.pause(queue, now_ms)  Mark `queue` paused
        pauses.paused()  Every paused queue and when it was paused (epoch ms)
        pauses.resume(queue)  Unmark `queue`

    outbox: `OutboxMarks` (store/rows.py), the transactional outbox's marks
        outbox.clear(mark_keys)  DEL each mark, one round trip

    failed_rows: `FailedRows` (store/rows.py), failed-task rows waiting for the database
        failed_rows.batch(count)  Up to about `count` waiting rows (one HSCAN call)
        failed_rows.count()  HLEN: how many rows wait
        failed_rows.forget(row_ids)  HDEL rows written (or given up)
        failed_rows.keep(row_id, row)  HSET one row

    leader: `Lease` (store/schedule.py), the scheduler's leader lease of the consumer group
        leader.expire_broken(ttl_ms)  PEXPIRE the key whatever it holds (a spoiled lease)
        leader.holder()  GET: the identity holding the lease, or None
        leader.release(identity)  DEL the key if `identity` holds it
        leader.renew(identity, ttl_ms)  PEXPIRE the key to `ttl_ms` if `identity` holds it
        leader.take(identity, ttl_ms)  SET key identity NX PX ttl_ms: True when the lease was
            free and is now ours
        leader.ttl_ms()  PTTL: milliseconds the lease has left

    server: `RedisServer` (store/server.py), the server itself
        server.check()  Raise ServerUnsupported when the server cannot run the app
        server.features()  The optional commands the server has, asked once per client
        server.info()  INFO server of the server

    `Store` itself
        on_client(client)  This store on another client of the same server (other timeouts)
    """

    def __init__(self, client: Any, prefix: str, group: str = DEFAULT_GROUP, *,
                 delete_on_ack: bool = True, finished: FinishedLimits | None = None) -> None:
        finished = finished or FinishedLimits()
        self.client = client
        self.prefix = prefix
        self.group = group
        self.finished_limits = finished
        self.streams = Broker(self, group, delete_on_ack)
        self.records = Records(client, prefix, finished)
        self.browse = StreamBrowser(client, prefix, group)
        self.inspect = Inspector(client, prefix, group)
        self.schedule = ScheduleStore(client, prefix)
        self.locks = UniqueLocks(client, prefix)
        self.finished = FinishedIndex(client, prefix, finished)
        self.results = Results(client, prefix)
        self.limits = Limits(client, prefix)
        self.workflows = WorkflowStore(client, prefix)
        self.fair = Fair(client, prefix)
        self.steps = StepsStore(client, prefix)
        self.stats = StatsStore(client, prefix)
        self.workers = WorkerDirectory(client, prefix)
        self.pauses = Pauses(client, prefix)
        self.outbox = OutboxMarks(client)
        self.failed_rows = FailedRows(client, prefix)
        self.leader = Lease(client, leader_key(prefix, group))
        self.server = RedisServer(client, prefix)

    def on_client(self, client: Any) -> Store:
        """This store on another client of the same server: one with other timeouts
        (`connection.bounded`), or a stand-in in a test."""
        return Store(client, self.prefix, self.group, delete_on_ack=self.streams.delete_on_ack,
                     finished=self.finished_limits)


_store: Store | None = None


def get_store() -> Store:
    """The store of the current settings and client (rebuilt after `conf.reset()`): the
    one place the store is handed its settings."""
    global _store
    store = _store
    if store is None:
        settings = get_settings()
        store = _store = Store(
            get_redis(), settings.PREFIX, settings.CONSUMER_GROUP,
            delete_on_ack=settings.DELETE_ON_ACK,
            finished=FinishedLimits(int(settings.FINISHED_LIST_SIZE), int(settings.RESULT_TTL)))
    return store


@on_reset
def reset() -> None:
    global _store
    _store = None
