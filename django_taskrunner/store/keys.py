"""The only module that builds Redis key names.

Layout: `<prefix>:{<queue>}:<kind>[:<part>...]`. The hash tag `{<queue>}` puts every key
of one queue in one Redis Cluster slot, so each Lua script touches a single slot.
Queue names are checked when declared (no `{`, `}` or `:`), so the tag is always
the queue name and nothing else; task names and unique keys may contain anything.

Shards: a queue split into N > 1 streams (`TASKRUNNER["SHARDS"]`) has N shard names,
`<queue>#0` ... `<queue>#<N-1>` (`#` cannot occur in a queue name), and every key of a
shard carries the shard name as its tag: `<prefix>:{<queue>#<i>}:stream`, `...:delayed`,
`...:unique:...`, `...:id:...`, `...:wake`, `...:periodic`. Each shard is a slot of its
own, so the shards of a hot queue spread over the cluster's masters. A queue that is not
split (N = 1) keeps its plain name, so its keys are the same as before shards existed.
The functions below that take a `queue` take a shard name just as well. Figures that
describe the whole queue (`stats`, `window`, `minute`, `workers`, `long-queue-gate`)
use the queue name.

Priority levels (docs/priorities.md): a message of priority p (0..9, other than the
default 5) goes to the level `<shard>!<p>` of its queue or shard. A level shares the
slot of its shard: only its stream and delayed set get a suffix (`{<shard>}:stream!<p>`,
`{<shard>}:delayed!<p>`); every other key of a level name (locks, task ids, cancelled,
wake, periodic) is the shard's own, so unique locks meet across levels. A queue that
never uses a priority has no level and no key more than before.
"""

from __future__ import annotations

import hashlib

SHARD_MARK = "#"
# The one field of a stream entry: it holds the message's wire JSON (core/message.py).
ENTRY_FIELD = b"m"


def shard_name(queue: str, index: int, count: int) -> str:
    """Shard `index` of a queue split into `count` streams; the queue itself if unsplit."""
    return queue if count == 1 else f"{queue}{SHARD_MARK}{index}"


def queue_of(name: str) -> str:
    """The queue a shard (or level) name belongs to (`"emails#2"`, `"emails!9"` ->
    `"emails"`); a queue is its own."""
    return name.partition(SHARD_MARK)[0].partition(LEVEL_MARK)[0]


LEVEL_MARK = "!"
DEFAULT_LEVEL = 5  # core/options.DEFAULT_PRIORITY: the shard's own stream


def level_name(shard: str, priority: int | None) -> str:
    """The stream name of `priority` in `shard`: the shard itself for None or the default."""
    if priority is None or priority == DEFAULT_LEVEL:
        return shard
    return f"{shard}{LEVEL_MARK}{priority}"


def shard_of(name: str) -> str:
    """The shard (or queue) a level name belongs to (`"emails#1!9"` -> `"emails#1"`)."""
    return name.partition(LEVEL_MARK)[0]


def level_of(name: str) -> int:
    """The priority of a stream name (`"emails!9"` -> 9; a shard's own stream: 5)."""
    _base, mark, level = name.partition(LEVEL_MARK)
    return int(level) if mark else DEFAULT_LEVEL


def level_names(shard: str) -> list[str]:
    """The names of every priority level of `shard` other than its own stream, highest
    first: the streams a reader probes (EXISTS) to find the levels in use."""
    return [level_name(shard, level) for level in range(9, -1, -1) if level != DEFAULT_LEVEL]


def by_level(names: list[str]) -> list[str]:
    """Stream names, highest priority first (a shard's own stream counts as 5)."""
    return sorted(names, key=level_of, reverse=True)


def stream_key(prefix: str, queue: str) -> str:
    """The Redis stream holding a queue's (or a priority level's) ready messages."""
    base, mark, level = queue.partition(LEVEL_MARK)
    return f"{prefix}:{{{base}}}:stream{mark}{level}"


def delayed_key(prefix: str, queue: str) -> str:
    """Sorted set of a queue's (or a level's) delayed messages, scored by due time in ms."""
    base, mark, level = queue.partition(LEVEL_MARK)
    return f"{prefix}:{{{base}}}:delayed{mark}{level}"


def unique_key(prefix: str, queue: str, task_name: str, key: str) -> str:
    """A unique task's lock; one lock per task name when `key` is empty."""
    base = f"{prefix}:{{{shard_of(queue)}}}:unique:{task_name}"
    return f"{base}:{key}" if key else base


def unique_key_space(prefix: str, queue: str) -> str:
    """`<prefix>:{<queue>}:unique:`, how every unique lock of one queue (or shard) starts."""
    return f"{prefix}:{{{shard_of(queue)}}}:unique:"


def unique_mode_key(prefix: str, queue: str, lock_key: str) -> str:
    """Companion of a unique lock: holds the lock's mode, with the lock's TTL.

    `<prefix>:{<queue>}:unique-mode:<task>[:<key>]`, the lock key with `unique` replaced,
    so the admin reads a lock's mode in the same round trip as its holder.
    """
    start = unique_key_space(prefix, queue)
    if not lock_key.startswith(start):
        raise ValueError(f"{lock_key!r} is not a unique lock of queue {queue!r}")
    return f"{prefix}:{{{shard_of(queue)}}}:unique-mode:{lock_key[len(start):]}"


def glob_escape(text: str) -> str:
    """`text` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def unique_pattern(prefix: str, queue: str = "*") -> str:
    """SCAN pattern matching the unique locks of one queue (or of all queues).

    The prefix (and a named queue) match literally; `*` for the queue matches any.
    """
    tag = "*" if queue == "*" else glob_escape(queue)
    return f"{glob_escape(prefix)}:{{{tag}}}:unique:*"


def unique_patterns(prefix: str, queue: str) -> list[str]:
    """SCAN patterns matching every unique lock of a queue, split into shards or not."""
    shards = f"{glob_escape(queue)}{glob_escape(SHARD_MARK)}*"
    return [unique_pattern(prefix, queue), f"{glob_escape(prefix)}:{{{shards}}}:unique:*"]


def task_id_key(prefix: str, queue: str, task_id: str) -> str:
    """Reservation of a caller-chosen `task_id` while its task is queued or running."""
    return f"{prefix}:{{{shard_of(queue)}}}:id:{task_id}"


def stats_key(prefix: str, queue: str) -> str:
    """Hash of counters and timings of one queue."""
    return f"{prefix}:{{{queue}}}:stats"


def window_key(prefix: str, queue: str, task_name: str | None = None) -> str:
    """List of recent run times (microseconds, newest first) of a queue, or of one task."""
    base = f"{prefix}:{{{queue}}}:window"
    return f"{base}:{task_name}" if task_name is not None else base


def minute_key(prefix: str, queue: str, minute: int) -> str:
    """Hash of one minute's completed/failed/retried counts; `minute` is epoch seconds // 60."""
    return f"{prefix}:{{{queue}}}:minute:{minute}"


def queue_workers_key(prefix: str, queue: str) -> str:
    """Sorted set of the workers consuming a queue, scored by when their heartbeat expires."""
    return f"{prefix}:{{{queue}}}:workers"


def worker_key(prefix: str, consumer: str) -> str:
    """Heartbeat hash of one worker process (pool size, busy threads...), with a TTL."""
    return f"{prefix}:worker:{consumer}"


def lost_mark_key(prefix: str, consumer: str) -> str:
    """String written by the worker that declared `consumer` lost and took its messages
    (the cause), with a TTL: a worker that comes back reads it and stops acking."""
    return f"{prefix}:worker:{consumer}:lost"


def long_queue_gate_key(prefix: str, queue: str) -> str:
    """Present while LONG_QUEUE_HOOK may not fire again for a queue (TTL = its cooldown)."""
    return f"{prefix}:{{{queue}}}:long-queue-gate"


def leader_key(prefix: str, group: str) -> str:
    """Leader lease of one consumer group."""
    return f"{prefix}:leader:{group}"


def result_key(prefix: str, result_id: str) -> str:
    """A Django Tasks framework result, kept for the backend's RESULT_TTL.

    Not queue-tagged: a result is looked up by its id alone, and no script touches it.
    """
    return f"{prefix}:result:{result_id}"


def wake_channel(prefix: str, queue: str) -> str:
    """Pub/sub channel on which a queue announces a delayed entry due earlier than the rest."""
    base, mark, level = queue.partition(LEVEL_MARK)  # a level's: `...:wake!<p>`
    return f"{prefix}:{{{base}}}:wake{mark}{level}"


def periodic_key(prefix: str, queue: str) -> str:
    """Hash of a queue's periodic schedules: schedule id -> last occurrence fired (epoch ms)."""
    return f"{prefix}:{{{shard_of(queue)}}}:periodic"


def periodic_channel(prefix: str) -> str:
    """Pub/sub channel announcing that the periodic schedules in the database changed."""
    return f"{prefix}:periodic:changed"


def known_queues_key(prefix: str) -> str:
    """Set of every queue a worker consumes, so the leader promotes delayed tasks of each."""
    return f"{prefix}:queues"


def record_tag(task_id: str) -> str:
    """The hash tag of one task's record keys: the id, or its digest when the id holds a
    brace (a caller's `task_id` may), so both keys of a record always share one slot."""
    if "{" in task_id or "}" in task_id:
        return hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()
    return task_id


def record_key(prefix: str, task_id: str) -> str:
    """Hash of one task's record (status, result, progress...), with a TTL.

    `<prefix>:record:{<id>}`: tagged by the task id, not the queue, because `lookup(id)`
    knows only the id; every script on it touches this key, `record_done_key` and
    `steps_key` only.
    """
    return f"{prefix}:record:{{{record_tag(task_id)}}}"


def record_done_key(prefix: str, task_id: str) -> str:
    """List `wait()` blocks on (BLMOVE onto itself): one element once the record is final.

    Written only when some `wait()` marked the record as watched; same slot as the record.
    """
    return f"{record_key(prefix, task_id)}:done"


def finished_key(prefix: str, queue: str) -> str:
    """Sorted set of a queue's finished task ids, scored by finish time (epoch ms): the
    admin's "finished" list. Capped: a final record write adds one, and once it holds 1%
    more than `FINISHED_LIST_SIZE` it is trimmed to the newest that many, none older
    than their records' TTL; an id whose record expired is dropped when a page finds
    it. Tagged by the queue (every shard's tasks), so on a cluster it sits beside the
    queue's streams, not beside the records.
    """
    return f"{prefix}:{{{queue}}}:finished"


def cancelled_key(prefix: str, queue: str) -> str:
    """Set of the ids cancelled while queued, delayed or running on a queue (or shard):
    its fetcher reads it with each XREADGROUP and skips those messages."""
    return f"{prefix}:{{{shard_of(queue)}}}:cancelled"


def cancel_channel(prefix: str) -> str:
    """Pub/sub channel on which `cancel()` tells the workers of a cancelled task (one per
    prefix: every worker process subscribes once; on a cluster PUBLISH reaches all)."""
    return f"{prefix}:cancels"


def cancel_reply_key(prefix: str, task_id: str, nonce: str) -> str:
    """List on which the worker holding a cancelled message answers one `cancel()` call
    (BLPOP); tagged like the task's record, short-lived."""
    return f"{prefix}:cancel-reply:{{{record_tag(task_id)}}}:{nonce}"


def workflow_key(prefix: str, workflow_id: str) -> str:
    """Hash of one workflow (status, counts, its stages' sizes and offsets), with a TTL.

    `<prefix>:workflow:{<id>}`: every key of one workflow shares the tag `{<id>}` (its
    id is letters and digits), so `workflow_member.lua` touches a single slot of them.
    """
    return f"{prefix}:workflow:{{{workflow_id}}}"


def workflow_done_key(prefix: str, workflow_id: str) -> str:
    """Set of the member indexes of one workflow that finished for good (counted once)."""
    return f"{workflow_key(prefix, workflow_id)}:done"


def workflow_members_key(prefix: str, workflow_id: str) -> str:
    """List of one workflow's member task ids, stage after stage."""
    return f"{workflow_key(prefix, workflow_id)}:members"


def workflow_bodies_key(prefix: str, workflow_id: str) -> str:
    """List parallel to the members: the message each later stage's member is sent as
    ('' for the first stage's, sent at dispatch)."""
    return f"{workflow_key(prefix, workflow_id)}:bodies"


def workflow_index_key(prefix: str) -> str:
    """Sorted set of workflow ids scored by dispatch time (epoch ms), for the admin."""
    return f"{prefix}:workflows"


LIMIT_KINDS = ("rate", "concurrency")


def limit_key(prefix: str, queue: str, kind: str, task_name: str, key: str) -> str:
    """A rate limit's log of recent starts (`kind` "rate": sorted set, member -> start
    ms) or a concurrency limit's slots (`kind` "concurrency": holder -> lease expiry ms).

    `<prefix>:{<queue>}:limit:<kind>:<task>[:<key>]`, tagged by the task's declared queue
    (never a shard), so the shards of a queue share one limit; each script touches this
    key and its `limit_waiting_key` only, one slot.
    """
    base = f"{prefix}:{{{queue}}}:limit:{kind}:{task_name}"
    return f"{base}:{key}" if key else base


def limit_waiting_key(prefix: str, queue: str, kind: str, task_name: str, key: str) -> str:
    """Sorted set of the task ids waiting on one limit, scored by when each tries again:
    `<prefix>:{<queue>}:limit-waiting:<kind>:<task>[:<key>]`."""
    base = f"{prefix}:{{{queue}}}:limit-waiting:{kind}:{task_name}"
    return f"{base}:{key}" if key else base


def waiting_of(prefix: str, limit: str) -> str:
    """The waiting set of the limit key `limit` (a name `limit_key` built)."""
    head, sep, tail = limit.partition("}:limit:")
    if not sep or not head.startswith(f"{prefix}:{{"):
        raise ValueError(f"{limit!r} is not a limit key")
    return f"{head}}}:limit-waiting:{tail}"


def limit_pattern(prefix: str) -> str:
    """SCAN pattern matching every limit key (rate logs and concurrency slots)."""
    return f"{glob_escape(prefix)}:{{*}}:limit:*"


def fair_ring_key(prefix: str, queue: str) -> str:
    """List of the fair keys of a queue (or shard, or level) that have tasks waiting, in
    turn order: the head key is served next (docs/flow-control.md, "Fair queues").
    `<prefix>:{<shard>}:fair-ring[!<p>]`; a queue that never used a fair key has none."""
    base, mark, level = queue.partition(LEVEL_MARK)
    return f"{prefix}:{{{base}}}:fair-ring{mark}{level}"


def fair_turns_key(prefix: str, queue: str) -> str:
    """Hash of the ring's keys: `w:<key>` -> its weight (turns in a row), `u:<key>` ->
    the turns it used of its current round. `<prefix>:{<shard>}:fair-turns[!<p>]`."""
    base, mark, level = queue.partition(LEVEL_MARK)
    return f"{prefix}:{{{base}}}:fair-turns{mark}{level}"


def fair_queue_key(prefix: str, queue: str) -> str:
    """Mark of a fair queue (or level), kept a day past its last keyed task: while it is
    there, the level's tasks without a key wait as one more turn, the key `""`.
    `<prefix>:{<shard>}:fair-queue[!<p>]`."""
    base, mark, level = queue.partition(LEVEL_MARK)
    return f"{prefix}:{{{base}}}:fair-queue{mark}{level}"


def fair_list_space(prefix: str, queue: str) -> str:
    """How every fair list of a queue (or level) starts: `<prefix>:{<shard>}:fair[!<p>]:`;
    `fair_feed.lua` appends a key from its ring to it (the same slot by the tag)."""
    base, mark, level = queue.partition(LEVEL_MARK)
    return f"{prefix}:{{{base}}}:fair{mark}{level}:"


def fair_list_key(prefix: str, queue: str, fair_key: str) -> str:
    """List of the bodies of one fair key's waiting tasks, oldest first."""
    return f"{fair_list_space(prefix, queue)}{fair_key}"


def fair_ring_names(shard: str) -> list[str]:
    """Every level name of `shard`, highest first (its own stream as 5): the rings a
    reader probes (EXISTS) to find the fair levels in use."""
    return [level_name(shard, level) for level in range(9, -1, -1)]


def outbox_mark_key(prefix: str, queue: str, message_id: str) -> str:
    """Mark of an outbox row already moved onto its stream (the holder, with a TTL):
    a flush that meets it again adds nothing (`core/outbox.py`)."""
    return f"{prefix}:{{{shard_of(queue)}}}:outbox:{message_id}"


def failed_rows_key(prefix: str) -> str:
    """Hash of the `FailedTask` rows the database refused when their task failed for good:
    "<message id>|<dispatch token>" -> the row's fields as JSON, until a flush writes it
    (`worker/failures.py`)."""
    return f"{prefix}:failed-rows"


def queues_seen_key(prefix: str) -> str:
    """Sorted set of the known queues, scored by when each was last seen (epoch ms): a
    worker consuming it (its heartbeat) or a dispatch to it. The leader forgets those
    not seen for long that hold nothing (`scheduling/scheduler.py`). Supersedes the plain
    set of `known_queues_key`, which is read too until the leader folds it in."""
    return f"{prefix}:queues:seen"


def queues_used_key(prefix: str) -> str:
    """Sorted set of the queues dispatches used, scored by the last such dispatch (epoch
    ms): `runtasks` without `--queue` consumes those used recently, besides the declared
    ones (a queue only a worker's mistyped `-Q` named is never in it)."""
    return f"{prefix}:queues:used"


def steps_key(prefix: str, task_id: str) -> str:
    """Hash of a task's kept step results (core/context.py): step name -> JSON of
    `{"result": ..., "at": <unix seconds>}`.

    `<prefix>:record:{<id>}:steps`: in its record's slot, so the record's writes
    (`record_write.lua`) give it the record's TTL in the same script.
    """
    return f"{record_key(prefix, task_id)}:steps"


def paused_queues_key(prefix: str) -> str:
    """Hash of the paused queues: queue name -> when it was paused (epoch ms). Fetchers
    read no new message of a queue in it; it has no expiry, so a pause outlives restarts
    until `resume_queue` removes the field (`store/schedule.py`)."""
    return f"{prefix}:queues:paused"


def workers_key(prefix: str) -> str:
    """Sorted set of the worker processes, scored by their last heartbeat (epoch ms): the
    admin's Workers page. A worker's heartbeat adds it, its clean stop removes it, and
    each heartbeat drops those not seen for `store.stats.WORKERS_KEPT_MS` (lost ones)."""
    return f"{prefix}:workers"
