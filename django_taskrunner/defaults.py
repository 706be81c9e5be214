"""The keys of the `TASKRUNNER` setting: each one's default and the line documenting it.

Its own module, below both `conf` (which merges the setting over it) and `checks`
(which reports unknown keys against it), so neither has to import the other back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One key of `TASKRUNNER`: its default and the line that documents it."""

    default: Any
    doc: str


DEFAULTS: dict[str, Option] = {
    "REDIS_URL": Option(None, "URL of the Redis server (redis://, rediss:// or unix://)."),
    "CONNECTION": Option(None, "Alias of a django-redis cache whose client to use instead."),
    "CLUSTER_NODES": Option(None, 'Startup nodes ["host:port", ...] of a Redis Cluster.'),
    "SHARDS": Option(
        1, "Streams each queue is split into: a number for every queue, or {queue: number}."
    ),
    "EMBEDDED_DIR": Option(
        None, "Data folder of the embedded Redis (default: BASE_DIR/.taskrunner)."
    ),
    "PREFIX": Option("taskrunner", "First part of every Redis key the app writes."),
    "CONSUMER_GROUP": Option("taskrunner", "Consumer group shared by every worker."),
    "DEFAULT_QUEUE": Option("default", "Queue of tasks that name none."),
    "RESERVATION_TIMEOUT": Option(
        300, "Seconds a message may stay un-acked without heartbeat before it is reclaimed."
    ),
    "BATCH_SIZE": Option(10, "Messages read from a stream in one XREADGROUP."),
    "PREFETCH_MS": Option(
        20, "Milliseconds of short tasks a read may grow to hold, up to 100 (0: BATCH_SIZE)."
    ),
    "BLOCK_MS": Option(1000, "Milliseconds an idle XREADGROUP blocks before it is repeated."),
    "MIN_WORKERS": Option(None, "Smallest autoscaled pool (None: a fixed pool of MAX_WORKERS)."),
    "MAX_WORKERS": Option(8, "Worker threads of a fixed pool, or the largest autoscaled one."),
    "DESIRED_WAIT": Option(1.0, "Seconds a task should wait in the queue; the autoscaler's goal."),
    "DESIRED_WAIT_TOLERANCE": Option(
        None, "Seconds around DESIRED_WAIT in which the pool keeps its size (None: half of it)."
    ),
    "TUNING_COOLDOWN": Option(
        10, "Seconds an autoscaled pool waits after a change before the next one."
    ),
    "STATS_INTERVAL": Option(
        1.0, "Seconds between a worker's writes of its statistics and heartbeat."
    ),
    "STATS_WINDOW": Option(200, "Recent run times kept per task and queue (averages, p95)."),
    "SHUTDOWN_TIMEOUT": Option(30, "Seconds running tasks get to finish on SIGTERM/SIGINT."),
    "ASYNC_CONCURRENCY": Option(
        100, "async def tasks a worker process awaits side by side on its event loop."
    ),
    "EAGER": Option(False, "Run dispatched tasks at once in the calling process (for tests)."),
    "DELETE_ON_ACK": Option(True, "Delete a message from its stream (XDEL) when it is acked."),
    "FAILED_TASK_HANDLER": Option(
        None, "Dotted path of a callable(task_message, exception) run for each failed task."
    ),
    "LONG_QUEUE_HOOK": Option(
        None, "Dotted path of a callable(stats) run when the predicted wait is too long."
    ),
    "LONG_QUEUE_THRESHOLD": Option(60, "Predicted wait, in seconds, that calls LONG_QUEUE_HOOK."),
    "LONG_QUEUE_COOLDOWN": Option(
        300, "Seconds after LONG_QUEUE_HOOK fired for a queue before it may fire again."
    ),
    "METRICS_TOKEN": Option(
        None, "Bearer token that may read the Prometheus metrics view (staff users always may)."
    ),
    "SOCKET_TIMEOUT": Option(10, "Seconds a Redis command may take before it fails."),
    "CONNECT_TIMEOUT": Option(5, "Seconds to connect to Redis before giving up."),
    "LEADER_LEASE": Option(
        10, "Seconds of the scheduler leader's lease: a dead leader is replaced within this."
    ),
    "TIME_LIMIT_GRACE": Option(
        5, "Seconds a task past its time_limit may take to stop before its thread is replaced."
    ),
    "PROCESSES": Option(
        1, "Worker processes `runtasks` runs, each with its own thread pool; an integer or "
        '"auto" (the CPU count). 1: one process, no supervisor (unless a child limit is set).',
    ),
    "MAX_TASKS_PER_CHILD": Option(
        None, "Tasks a worker process runs before it is replaced by a fresh one (None: no limit)."
    ),
    "MAX_MEMORY_PER_CHILD": Option(
        None, "Megabytes of resident memory past which a worker process is replaced, checked "
        "between tasks (None: no limit).",
    ),
    "WORKER_LOST_AFTER": Option(
        15, "Seconds without a heartbeat after which a worker is declared lost and its "
        "messages are handed to the others at once.",
    ),
    "RESULT_TTL": Option(
        86400, "Seconds a finished task's record (status, result, error) is kept; 0: none."
    ),
    "FINISHED_LIST_SIZE": Option(
        10_000, "Finished tasks listed per queue on the admin's Tasks page (the newest are "
        "kept, for as long as their records); 0: no list.",
    ),
    "QUEUE_FORGET_AFTER": Option(
        86400, "Seconds a known queue may go unseen, empty, before the leader forgets it; "
        "0: never.",
    ),
    "DEAD_CONSUMER_TIMEOUT": Option(
        None, "Seconds a consumer with nothing pending may stay idle before it is removed from "
        "the group (None: the larger of 1 hour and 10 x RESERVATION_TIMEOUT).",
    ),
    "OUTBOX": Option(
        True, "Dispatches on commit (dispatch_on_commit, dispatch_on) go through the "
        "transactional outbox: written in the caller's transaction, never lost after it commits.",
    ),
    "OUTBOX_WARN_AGE": Option(
        300, "Seconds an outbox row may wait before `check --database` warns (taskrunner.W030)."
    ),
}
