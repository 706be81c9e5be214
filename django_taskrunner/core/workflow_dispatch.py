"""A workflow dispatched: every member's message built and checked, then written and its
first stage sent (or, in eager mode, every stage run here and now).

Every message of every stage is built and checked first (the same `prepare()` and
encoding as `dispatch()`), before anything is written, so a bad one queues nothing. The
first stage is sent at once; each later stage's messages wait in the workflow's keys
until `workflow_member.lua` (the worker's acker batch, after the member's task record)
counts the last member of the stage before and sends them, in the same step: counted
once per member, dispatched once, whatever crashed when.

The signatures, groups and chains handed in are `core/workflows.py`'s; this module
only reads their stages.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django_taskrunner.conf import Settings, get_settings
from django_taskrunner.core import clock
from django_taskrunner.core.awaitables import run_to_end
from django_taskrunner.core.context import TaskContext
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.prepare import new_message, new_message_id
from django_taskrunner.core.records import PENDING_TTL_S, dispatch_record, encode_value
from django_taskrunner.core.sending import announce_queue
from django_taskrunner.core.unique import holder_value
from django_taskrunner.core.workflow_lookup import WorkflowHandle, store
from django_taskrunner.exceptions import InvalidTaskOptions, TaskAlreadyDispatched, TaskIdConflict
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, unavailable
from django_taskrunner.store.locks import get_locks
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.store.workflows import FirstMessage, MemberDone, WorkflowStore

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task
    from django_taskrunner.core.unique import Claim
    from django_taskrunner.core.workflows import Signature, Workflow

    Stages = list[tuple[str, list[Signature]]]

# The name these lines were logged under before this module was split off
# `core/workflows.py`: logging configurations name it.
logger = logging.getLogger("django_taskrunner.core.workflows")

# Options only the first stage may carry: taken (or fixed) at dispatch time, while a
# later stage's messages are sent by a script that takes no lock and knows no clock.
FIRST_STAGE_ONLY = frozenset({"task_id", "unique_key", "unique_for", "unique_mode", "when"})
# A record not written yet: the workflow has not sent this member (a later stage).
WAITING = "delayed"  # a later step: not sent yet, no due time (`due_at` None)


@dataclass
class _Member:
    signature: Signature
    message: TaskMessage
    claim: Claim | None
    shard: str
    due_ms: int | None


def dispatch_workflow(workflow: Workflow) -> WorkflowHandle:
    """Build and check every message of `workflow`, then write it and send its first
    stage in one pipelined round trip (plus one for first-stage unique members).

    Raises:
        InvalidTaskOptions: an option only the first stage may take on a later one.
        TaskNotFound, InvalidTaskPayload, ...: as `dispatch()`, before anything is queued.
        RedisUnavailable: Redis could not be reached.
    """
    stages = workflow.stages
    settings = get_settings()
    now = clock.now_ms()
    workflow_id = new_message_id()
    built = _build(workflow_id, stages, now)
    bodies, records, first = _encode(built, now)
    if settings.EAGER:
        return _run_eager(workflow_id, stages, built)
    fields = _fields(stages, built, now, settings)
    member_ids = [member.message.id for row in built for member in row]
    longest = max((member.due_ms - now for row in built for member in row
                   if member.due_ms is not None), default=0)
    try:
        workflows = store()
        if workflows.clustered:
            raise InvalidTaskOptions("workflows need a single Redis server, not a cluster")
        stream_ids = workflows.create(workflow_id, fields, member_ids, bodies, records, first,
                                      created_ms=now,
                                      ttl_s=PENDING_TTL_S * len(stages) + longest // 1000)
        _add_claimed(workflows, [member for member in built[0] if member.claim is not None])
    except REDIS_DOWN as exc:
        raise unavailable("cannot dispatch a workflow", exc, built_client()) from exc
    _sent(built, stream_ids)
    return WorkflowHandle(workflow_id, tuple(member_ids))


def _build(workflow_id: str, stages: Stages, now: int) -> list[list[_Member]]:
    """Every member's checked message, stage after stage; each message of a stage knows
    the shards of the next (`nx`), where the script sends that stage."""
    templates: dict[str, TaskMessage] = {}
    built: list[list[_Member]] = []
    index = 0
    for stage, (_kind, members) in enumerate(stages):
        row = []
        for signature in members:
            row.append(_member(signature, workflow_id, index, stage, now, templates))
            index += 1
        built.append(row)
    for stage, row in enumerate(built[:-1]):
        shards = list(dict.fromkeys(member.shard for member in built[stage + 1]))
        for member in row:
            member.message.workflow["nx"] = shards
    return built


def _member(signature: Signature, workflow_id: str, index: int, stage: int, now: int,
            templates: dict[str, TaskMessage]) -> _Member:
    """Member `index` (of stage `stage`): its message, claim, shard and due time."""
    if stage > 0:
        later = sorted(FIRST_STAGE_ONLY & set(signature.options))
        if later:
            raise InvalidTaskOptions(
                f"option(s) {', '.join(later)} of task {signature.task.name!r} apply "
                f"to a workflow's first step only")
    if signature.plain:  # as dispatch_many: one template per task
        message, claim = _from_template(templates, signature), None
    else:
        message, claim = signature.prepared(now)
    message.workflow = {"id": workflow_id, "j": index, "k": stage}
    if stage > 0 and message.expires_at_ms is not None:
        # Counted from when the step is sent, not from now (see TaskMessage).
        start = signature.due_ms(now) or now
        message.workflow["xr"] = max(0, message.expires_at_ms - start)
        message.expires_at_ms = None
    shard = keys.level_name(  # its priority's stream there, if it has one
        claim.shard if claim is not None else sharding.next_shard(message.queue),
        message.priority)
    return _Member(signature, message, claim, shard, signature.due_ms(now))


def _encode(built: list[list[_Member]], now: int
            ) -> tuple[list[str], list[RecordWrite], list[FirstMessage]]:
    """The members' bodies as the workflow keeps them ("" for the first stage, sent at
    once: `FirstMessage`s, but for claimed ones), and their task records."""
    bodies, records, first = [], [], []
    for stage, row in enumerate(built):
        shards = ([] if stage == 0 else
                  list(dict.fromkeys(member.shard for member in row)))
        for member in row:
            body = member.message.to_json()
            task = member.signature.task
            if stage == 0:
                bodies.append("")
                if member.claim is None:
                    first.append(FirstMessage(member.shard, body, member.due_ms))
                    record = dispatch_record(member.message, task, member.shard, member.due_ms)
                    if record is not None:
                        records.append(record)
                continue
            delay_ms = 0 if member.due_ms is None else max(0, member.due_ms - now)
            bodies.append(f"{shards.index(member.shard)}|{delay_ms}|{body}")
            record = dispatch_record(member.message, task, member.shard)
            if record is not None:
                records.append(_waiting(record))
    return bodies, records, first


def _fields(stages: Stages, built: list[list[_Member]], now: int,
            settings: Settings) -> dict[str, str]:
    """The workflow's hash: its counts, and each stage's size, offset and kind."""
    sizes = [len(row) for row in built]
    total = sum(sizes)
    fields = {"status": "running", "name": _describe(stages), "stages": str(len(stages)),
              "stage": "0", "total": str(total), "pending": str(total - sizes[0]),
              "running": str(sizes[0]), "succeeded": "0", "failed": "0",
              "created": str(now), "ttl": str(max(1, int(settings.RESULT_TTL)))}
    offset = 0
    for stage, (kind, _members) in enumerate(stages):
        fields.update({f"n:{stage}": str(sizes[stage]), f"o:{stage}": str(offset),
                       f"kind:{stage}": kind})
        offset += sizes[stage]
    return fields


def _sent(built: list[list[_Member]], stream_ids: list[str]) -> None:
    """The first stage's plain messages get their stream ids; every queue the workflow
    uses is announced (`announce_queue`)."""
    plain = iter(stream_ids)
    for member in built[0]:
        if member.claim is None:
            member.message.stream_id = next(plain)
    broker = get_broker()
    _note_stream_ids(broker, [member.message for member in built[0]
                              if member.claim is None and member.due_ms is None])
    for queue in dict.fromkeys(member.message.queue for row in built for member in row):
        announce_queue(broker, queue)


def _note_stream_ids(broker: Any, sent: list[TaskMessage]) -> None:
    """The first stage's records learn their entries (`record_sid.lua`, one round trip),
    so a lookup by id reads the entry instead of searching the stream. The workflow is
    already sent: a Redis outage here costs only that, not the dispatch."""
    try:
        broker.records.set_stream_ids([(message.id, holder_value(message), message.stream_id)
                                       for message in sent if message.stream_id])
    except REDIS_DOWN as exc:
        logger.warning("workflow's first stage sent; its records' stream ids not written "
                       "(%s): the admin searches the stream for them", exc)


def _describe(stages: Stages) -> str:
    parts = []
    for kind, members in stages:
        if kind == "one":
            parts.append(members[0].task.name.rpartition(".")[2])
        else:
            parts.append(f"group({members[0].task.name.rpartition('.')[2]} x{len(members)})")
    text = " -> ".join(parts)
    return text if len(text) <= 200 else text[:197] + "..."


def _run_eager(workflow_id: str, stages: Stages,
               built: list[list[_Member]]) -> WorkflowHandle:
    """Eager mode: run the stages here and now, in order, as a worker would: a step that
    fails for good raises (what its last attempt raised) and ends the workflow; a group
    member that does leaves None among the results. Delays and unique locks do not
    apply, and no record is kept."""
    parent: Any = None
    for (kind, _members), row in zip(stages, built, strict=True):
        results = []
        for member in row:
            try:
                results.append(_eager_member(member.signature.task, member.message, parent))
            except Exception:
                if kind == "one":
                    raise
                logger.info("eager workflow %s: member %s failed for good",
                            workflow_id, member.message.id, exc_info=True)
                results.append(None)
        parent = results[0] if kind == "one" else results
    return WorkflowHandle(workflow_id, tuple(member.message.id for row in built
                                            for member in row))


def _eager_member(task: Task, message: TaskMessage, parent: Any) -> Any:
    """One member's attempts in eager mode; its result as a record would give it back."""
    received = TaskMessage.from_json(message.to_json())
    while True:
        try:
            if task.options.takes_context:
                result = task.fn(TaskContext(id=received.id, task_name=received.task_name,
                                             queue=received.queue, attempt=received.attempt,
                                             _parent=lambda: parent), received.payload)
            else:
                result = task.fn(received.payload)
            if task.is_async:
                result = run_to_end(result)
            encoded, _why = encode_value(result, "result")
            return None if encoded is None else json.loads(encoded)
        except Exception:
            if received.attempt > task.options.max_retry:
                raise
            received = replace(received, attempt=received.attempt + 1)


def _from_template(templates: dict[str, TaskMessage], signature: Signature) -> TaskMessage:
    """A plain signature's message: queue, expiry, reservation timeout and trace are
    worked out once per task (`new_message`), as `dispatch_many` does for a batch."""
    task = signature.task
    first = templates.get(task.name)
    if first is None:
        first = templates[task.name] = new_message(task, None)
    return TaskMessage(id=new_message_id(), task_name=first.task_name,
                       queue=first.queue, payload=signature.payload,
                       dispatched_at_ms=first.dispatched_at_ms,
                       expires_at_ms=first.expires_at_ms,
                       reservation_timeout_ms=first.reservation_timeout_ms,
                       trace_context=first.trace_context)


def _waiting(record: RecordWrite) -> RecordWrite:
    """The record of a later stage's member: "delayed" (with no due time) until the
    workflow sends it."""
    fields = tuple((name, WAITING if name == "s" else value) for name, value in record.fields)
    return replace(record, fields=fields)


def _add_claimed(workflows: WorkflowStore, members: list[_Member]) -> None:
    """First-stage members that take a unique lock or a task_id: one enqueue script each,
    pipelined; a member whose lock is held is counted as failed (the group goes on)."""
    if not members:
        return
    broker = get_broker()
    reservations, records = [], []
    for member in members:
        assert member.claim is not None
        body = member.message.to_json()
        if member.due_ms is None:
            reservations.append(member.claim.reservation(broker.stream(member.shard), body, None))
        else:
            reservations.append(member.claim.reservation(
                keys.delayed_key(broker.prefix, member.shard), body, member.due_ms,
                wake_channel=keys.wake_channel(broker.prefix, member.shard)))
        records.append(dispatch_record(member.message, member.signature.task, member.shard,
                                       member.due_ms, member.claim))
    replies = get_locks().add_reserved_many(reservations, records)
    for member, reply in zip(members, replies, strict=True):
        assert member.claim is not None
        try:
            member.message.stream_id = member.claim.read_reply(reply)
        except (TaskAlreadyDispatched, TaskIdConflict) as exc:
            workflow = member.message.workflow
            assert workflow is not None
            workflows.member_done(MemberDone(
                workflow["id"], workflow["j"], 0, "failed", tuple(workflow.get("nx", ())),
                max(1, int(get_settings().RESULT_TTL))))
            logger.info("workflow %s: member %s not queued: %s", workflow["id"],
                        member.message.id, exc)
