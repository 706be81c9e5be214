"""Workflows (chains, groups): each one's state under keys tagged by its id.

What a workflow is (stages of members, the message of each) is decided in
`core/workflows.py`; this module runs the commands on plain values. Keys:
`keys.workflow_key` (a hash: status, counts, per stage `n:<k>` size, `o:<k>` offset
into the members, `kind:<k>` "one" or "group", `done:<k>`), `workflow_done_key` (the
member indexes counted), `workflow_members_key` (task ids) and `workflow_bodies_key`
(the later stages' messages), all in the slot `{<id>}`; `workflow_index_key` lists them.

A member's completion is `workflow_member.lua`, queued on the acker's batch after the
task records (`queue_member_done`, from `Broker.settle`): it counts the member once and
sends the next stage in the same step. That script writes into the next stage's
streams, so it needs every key on one server: workflows do not run on Redis Cluster
(`clustered`). Redis outage errors (`errors.REDIS_DOWN`) pass through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text
from django_taskrunner.store.records import Records, RecordWrite

SCRIPTS = ("workflow_member",)  # queued as bare EVALSHA: loaded again on NOSCRIPT
# Ids and bodies are pushed this many per RPUSH, so no single command grows huge.
PUSH_CHUNK = 1000


@dataclass(frozen=True)
class MemberDone:
    """A member that finished for good: `outcome` "succeeded" or "failed"; `shards`
    the next stage's streams (queues or shards, indexed by its bodies)."""

    workflow_id: str
    member: int
    stage: int
    outcome: str
    shards: tuple[str, ...] = ()
    ttl_s: int = 86400


@dataclass(frozen=True)
class FirstMessage:
    """A first-stage message sent with the workflow's creation: XADD, or ZADD to the
    delayed set when `due_ms` is set."""

    shard: str
    body: str
    due_ms: int | None = None


class WorkflowStore:
    """The workflows under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    @property
    def clustered(self) -> bool:
        """True on a Redis Cluster, where a workflow's script cannot reach its queues."""
        return hasattr(self.client, "get_primaries")

    def _keys(self, workflow_id: str) -> list[str]:
        return [keys.workflow_key(self.prefix, workflow_id),
                keys.workflow_done_key(self.prefix, workflow_id),
                keys.workflow_members_key(self.prefix, workflow_id),
                keys.workflow_bodies_key(self.prefix, workflow_id)]

    def create(
        self, workflow_id: str, fields: Mapping[str, str], member_ids: Sequence[str],
        bodies: Sequence[str], records: Sequence[RecordWrite], first: Sequence[FirstMessage],
        *, created_ms: int, ttl_s: int,
    ) -> list[str]:
        """Write the workflow (hash, members, bodies, index entry, the members' records),
        then send its first stage: one pipelined round trip. Returns the first stage's
        stream ids ("delayed" for a delayed one), in order."""
        workflow, _done, members, later = self._keys(workflow_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("HSET", workflow, *[part for pair in fields.items() for part in pair])
        for start in range(0, len(member_ids), PUSH_CHUNK):
            pipe.execute_command("RPUSH", members, *member_ids[start:start + PUSH_CHUNK])
            pipe.execute_command("RPUSH", later, *bodies[start:start + PUSH_CHUNK])
        for key in (workflow, members, later):
            pipe.execute_command("EXPIRE", key, ttl_s)
        index = keys.workflow_index_key(self.prefix)
        pipe.execute_command("ZADD", index, created_ms, workflow_id)
        # Entries older than any workflow's TTL are dropped as new ones come.
        pipe.execute_command("ZREMRANGEBYSCORE", index, "-inf", created_ms - ttl_s * 1000)
        store = Records(self.client, self.prefix)
        for record in records:
            store.queue_new(pipe, record)
        skip = len(pipe.command_stack)
        self._send_first(pipe, first)
        return _first_ids(first, pipe.execute()[skip:])

    def _send_first(self, pipe: Any, first: Sequence[FirstMessage]) -> None:
        """The first stage's XADD (or ZADD + PUBLISH of a delayed one), on `pipe`."""
        for message in first:
            if message.due_ms is None:
                pipe.execute_command("XADD", keys.stream_key(self.prefix, message.shard), "*",
                                     keys.ENTRY_FIELD, message.body)
            else:
                pipe.execute_command("ZADD", keys.delayed_key(self.prefix, message.shard),
                                     message.due_ms, message.body)
                pipe.execute_command("PUBLISH", keys.wake_channel(self.prefix, message.shard),
                                     message.due_ms)

    # -- worker ----------------------------------------------------------------------

    def member_args(self, done: MemberDone) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of `workflow_member.lua` for one finished member."""
        call_keys = self._keys(done.workflow_id)
        channels = []
        for shard in done.shards:
            call_keys += [keys.stream_key(self.prefix, shard),
                          keys.delayed_key(self.prefix, shard)]
            channels.append(keys.wake_channel(self.prefix, shard))
        return call_keys, [str(done.member), str(done.stage), done.outcome, str(done.ttl_s),
                           keys.ENTRY_FIELD.decode(), *channels]

    def queue_member_done(self, pipe: Any, dones: Sequence[MemberDone]) -> None:
        """Queue `workflow_member.lua` for each finished member on `pipe` (bare EVALSHA;
        the caller runs it through `scripts.execute_loading`)."""
        for done in dones:
            scripts.queue(pipe, "workflow_member", *self.member_args(done))

    def member_done(self, done: MemberDone) -> str:
        """`workflow_member.lua` for one member, in a round trip of its own."""
        return text(scripts.run(self.client, "workflow_member", *self.member_args(done)))

    # -- clients ---------------------------------------------------------------------

    def load(self, workflow_id: str) -> dict[str, str] | None:
        """HGETALL of the workflow; None when there is none (or it expired)."""
        raw = self.client.hgetall(keys.workflow_key(self.prefix, workflow_id))
        return {text(k): text(v, errors="replace") for k, v in raw.items()} or None

    def load_many(self, workflow_ids: Sequence[str]) -> list[dict[str, str] | None]:
        """HGETALL of each workflow, one pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        for workflow_id in workflow_ids:
            pipe.hgetall(keys.workflow_key(self.prefix, workflow_id))
        return [{text(k): text(v, errors="replace") for k, v in raw.items()} or None
                for raw in pipe.execute()]

    def members(self, workflow_id: str, start: int, stop: int) -> list[str]:
        """LRANGE of the member ids from `start` to `stop` (inclusive)."""
        return [text(member) for member in self.client.lrange(
            keys.workflow_members_key(self.prefix, workflow_id), start, stop)]

    def done(self, workflow_id: str, indexes: Sequence[int]) -> list[bool]:
        """SMISMEMBER: whether each member index was counted finished."""
        if not indexes:
            return []
        replies = self.client.smismember(keys.workflow_done_key(self.prefix, workflow_id),
                                         [str(index) for index in indexes])
        return [bool(reply) for reply in replies]

    def cancel(self, workflow_id: str, now_ms: int, ttl_s: int) -> tuple[str, str]:
        """`workflow_cancel.lua`: ("ok", current stage), ("final", status), ("unknown", "")."""
        reply = [text(part) for part in scripts.run(
            self.client, "workflow_cancel", self._keys(workflow_id), [str(now_ms), str(ttl_s)])]
        return reply[0], reply[1] if len(reply) > 1 else ""

    def page(self, top_ms: int | None, count: int) -> list[tuple[str, int]]:
        """Workflow ids newest first, dispatched at or before `top_ms` (None: any), with
        their dispatch times: ZREVRANGEBYSCORE of the index, LIMIT `count`."""
        top = "+inf" if top_ms is None else str(top_ms)
        rows = self.client.zrevrangebyscore(keys.workflow_index_key(self.prefix), top, "-inf",
                                            start=0, num=count, withscores=True)
        return [(text(member), int(score)) for member, score in rows]

    def forget(self, workflow_ids: Sequence[str]) -> None:
        """ZREM from the index workflows whose keys expired."""
        if workflow_ids:
            self.client.zrem(keys.workflow_index_key(self.prefix), *workflow_ids)

    def record_fields(self, task_ids: Sequence[str], names: Sequence[str]) -> list[list[Any]]:
        """HMGET `names` of each task's record, one pipelined round trip (the results a
        step's parent left, read from the task records themselves)."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hmget(keys.record_key(self.prefix, task_id), list(names))
        return [[None if value is None else text(value, errors="replace") for value in row]
                for row in pipe.execute()]


def _first_ids(first: Sequence[FirstMessage], replies: Sequence[Any]) -> list[str]:
    """The stream id of each first-stage message ("delayed" for a delayed one, whose
    ZADD and PUBLISH are two replies), from the pipeline's replies after the writes."""
    ids, position = [], 0
    for message in first:
        if message.due_ms is None:
            ids.append(text(replies[position]))
            position += 1
        else:
            ids.append("delayed")
            position += 2
    return ids
