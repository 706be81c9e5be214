"""Workflows: signatures (`Task.s`), `chain`, `group`, the stages they make; a workflow
dispatched, read back and cancelled.

A workflow is a list of *stages*, each a list of members: a signature alone is a stage
of one ("one": the next stage starts only when it succeeded), a group a stage of many
("group": the next stage starts when every member finished, succeeded or failed); a
group's `then` callback is a stage of one after it, and a chain is its steps' stages one
after the other. `chain(a, group(b, c, then=d), e)` has the stages [a] [b, c] [d] [e].

A signature is checked where it is written. `.dispatch()` (`dispatch_workflow`) builds
and checks every message of every stage first (the same `prepare()` and encoding as
`dispatch()`), before anything is written, so a bad one queues nothing; the first stage
is sent at once (or, in eager mode, every stage runs here and now). Each later stage's
messages wait in the workflow's keys until `workflow_member.lua` (the worker's acker
batch, after the member's task record) counts the last member of the stage before and
sends them, in the same step: counted once per member, dispatched once, whatever
crashed when.

A dispatched workflow is read back and cancelled through `store/workflows.py`
(`lookup_workflow`, `cancel_workflow`, `WorkflowHandle`). A member's result is its task
record's (`core/records.py`); `ctx.parent_result` reads the records of the stage before
(`parent_result`).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django_taskrunner.conf import Settings, get_settings
from django_taskrunner.core import clock, dispatch, sharding
from django_taskrunner.core.awaitables import run_to_end
from django_taskrunner.core.context import TaskContext
from django_taskrunner.core.dispatch import new_message, new_message_id
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.records import (
    PENDING_TTL_S,
    cancel,
    dispatch_record,
    encode_value,
    json_value,
)
from django_taskrunner.core.registry import registry
from django_taskrunner.core.sending import announce_queue
from django_taskrunner.core.unique import UniqueClaim, holder_value
from django_taskrunner.exceptions import (
    InvalidTaskOptions,
    TaskAlreadyDispatched,
    TaskIdConflict,
    UnreadableData,
)
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, REPLY_ERROR, unavailable
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.store.workflows import FirstMessage, MemberDone, WorkflowStore

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task

logger = logging.getLogger(__name__)

# Options of a signature besides those of `prepare()`: when its message starts.
TIMING_OPTIONS = frozenset({"delay", "when"})


def _option_names(function: Any) -> frozenset[str]:
    return frozenset(name for name, parameter in inspect.signature(function).parameters.items()
                     if parameter.kind is inspect.Parameter.KEYWORD_ONLY)


# The options a signature passes through to `prepare()`: read from its signature, so an
# option another release adds to the dispatch (a priority) is carried without a change.
PREPARE_OPTIONS = _option_names(dispatch.prepare) - {"start_ms"}


def _check_options(task_name: str, options: Mapping[str, Any]) -> None:
    known = PREPARE_OPTIONS | TIMING_OPTIONS
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidTaskOptions(
            f"unknown option(s) {', '.join(unknown)} for a signature of task {task_name!r}; "
            f"known: {', '.join(sorted(known))}")
    if "delay" in options and "when" in options:
        raise InvalidTaskOptions(f"give delay or when, not both (task {task_name!r})")


def _due_ms(options: Mapping[str, Any], now_ms: int) -> int | None:
    if options.get("delay") is not None:
        return dispatch.due_from_delay(options["delay"], now_ms)
    if options.get("when") is not None:
        return dispatch.due_from_when(options["when"])
    return None


@dataclass(frozen=True)
class Signature:
    """A dispatch described, not done: a task, its payload and dispatch options.

    Built by `Task.s(payload, **options)`; checked at once like `dispatch()` would
    (registered task, JSON payload, options), so a mistake raises where it is written.
    """

    task: Task
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        task = dispatch.resolve_task(self.task)
        registry.get(task.name)  # TaskNotFound for a task no worker could run
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "options", dict(self.options))
        _check_options(task.name, self.options)
        if self.plain:  # the payload's checks, without a whole dispatch's preparation
            TaskMessage(id="0" * 32, task_name=task.name, queue="", payload=self.payload
                        ).to_json()
        else:
            self.prepare(clock.now_ms()).to_json()  # InvalidTaskPayload, InvalidTaskOptions

    @property
    def plain(self) -> bool:
        """No option of its own, no lock and no fair key (worked out per payload): its
        message is the task's template's."""
        return (not self.options and not self.task.options.unique
                and self.task.options.fair_key is None)

    def prepare(self, now_ms: int) -> TaskMessage:
        """A checked first-attempt message (its claim, if any, through `claim()`)."""
        return self.prepared(now_ms)[0]

    def prepared(self, now_ms: int) -> tuple[TaskMessage, UniqueClaim | None]:
        due_ms = self.due_ms(now_ms)
        passed = {name: value for name, value in self.options.items()
                  if name in PREPARE_OPTIONS}
        return dispatch.prepare(self.task, self.payload, start_ms=due_ms, **passed)

    def due_ms(self, now_ms: int) -> int | None:
        """When its message may start (its `delay` or `when`); None: at once."""
        return _due_ms(self.options, now_ms)

    @property
    def stages(self) -> list[tuple[str, list[Signature]]]:
        return [("one", [self])]

    def to_dict(self) -> dict[str, Any]:
        """The signature as JSON-ready data; `Signature.from_dict` reads it back."""
        options = dict(self.options)
        for name, value in options.items():
            if callable(value):
                raise InvalidTaskOptions(
                    f"option {name} of a signature of task {self.task.name!r} is a "
                    f"callable, which JSON cannot carry")
        if "delay" in options and not isinstance(options["delay"], int | float):
            options["delay"] = dispatch.delay_seconds(options["delay"])
        if "when" in options:
            options["when"] = options["when"].isoformat()
        return {"task": self.task.name, "payload": self.payload, "options": options}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signature:
        if not isinstance(data, Mapping) or not isinstance(data.get("task"), str):
            raise InvalidTaskOptions(f"a signature's data needs a task name, not {data!r:.80}")
        options = dict(data.get("options") or {})
        if isinstance(options.get("when"), str):
            options["when"] = datetime.fromisoformat(options["when"])
        return cls(registry.get(data["task"]), data.get("payload"), options)

    def dispatch(self) -> WorkflowHandle:
        """Dispatch this signature as a workflow of one step."""
        return dispatch_workflow(self)

    def __repr__(self) -> str:
        return f"{self.task.name}.s({self.payload!r})"


@dataclass(frozen=True)
class Group:
    """Members that run side by side, and an optional `then` callback run once after
    every member finished for good (succeeded or failed)."""

    members: tuple[Signature, ...]
    then: Signature | None = None

    def __post_init__(self) -> None:
        if not self.members:
            raise InvalidTaskOptions("a group needs at least one member")
        for member in self.members:
            if not isinstance(member, Signature):
                raise InvalidTaskOptions(
                    f"a group's members are signatures (task.s(...)), not "
                    f"{type(member).__name__}")
        if self.then is not None and not isinstance(self.then, Signature):
            raise InvalidTaskOptions(f"a group's then is a signature (task.s(...)), not "
                                     f"{type(self.then).__name__}")

    @property
    def stages(self) -> list[tuple[str, list[Signature]]]:
        stages: list[tuple[str, list[Signature]]] = [("group", list(self.members))]
        if self.then is not None:
            stages.append(("one", [self.then]))
        return stages

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"group": [member.to_dict() for member in self.members]}
        if self.then is not None:
            data["then"] = self.then.to_dict()
        return data

    def dispatch(self) -> WorkflowHandle:
        """Send the members now; the callback once they all finished."""
        return dispatch_workflow(self)


@dataclass(frozen=True)
class Chain:
    """Steps run one after the other: a step starts when the one before succeeded (a
    group: when all its members finished); a step that failed for good ends it."""

    steps: tuple[Signature | Group | Chain, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise InvalidTaskOptions("a chain needs at least one step")
        for step in self.steps:
            if not isinstance(step, Signature | Group | Chain):
                raise InvalidTaskOptions(
                    f"a chain's steps are signatures, groups or chains, not "
                    f"{type(step).__name__}")

    @property
    def stages(self) -> list[tuple[str, list[Signature]]]:
        return [stage for step in self.steps for stage in step.stages]

    def to_dict(self) -> dict[str, Any]:
        return {"chain": [step.to_dict() for step in self.steps]}

    def dispatch(self) -> WorkflowHandle:
        """Send the first step now, each next one when the one before finished."""
        return dispatch_workflow(self)


Workflow = Signature | Group | Chain
Stages = list[tuple[str, list[Signature]]]


def chain(*steps: Workflow) -> Chain:
    """Steps (signatures, groups, chains) to run one after the other."""
    return Chain(tuple(steps))


def group(*members: Signature, then: Signature | None = None) -> Group:
    """Signatures to run side by side, then (optionally) one callback."""
    return Group(tuple(members), then)


def from_dict(data: Mapping[str, Any]) -> Workflow:
    """A signature, group or chain from its `to_dict()` data."""
    if "chain" in data:
        return Chain(tuple(from_dict(step) for step in data["chain"]))
    if "group" in data:
        then = data.get("then")
        return Group(tuple(Signature.from_dict(member) for member in data["group"]),
                     None if then is None else Signature.from_dict(then))
    return Signature.from_dict(data)


# A workflow dispatched: built and checked, then written and its first stage sent.

# Options only the first stage may carry: taken (or fixed) at dispatch time, while a
# later stage's messages are sent by a script that takes no lock and knows no clock.
FIRST_STAGE_ONLY = frozenset({"task_id", "unique_key", "unique_for", "unique_mode", "when"})
# A record not written yet: the workflow has not sent this member (a later stage).
WAITING = "delayed"  # a later step: not sent yet, no due time (`due_at` None)


@dataclass
class _Member:
    signature: Signature
    message: TaskMessage
    claim: UniqueClaim | None
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
    broker = get_store().streams
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
    broker = get_store().streams
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
    replies = get_store().locks.add_reserved_many(reservations, records)
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


# A dispatched workflow read back and cancelled; a stage's results for its children.


@dataclass(frozen=True)
class WorkflowHandle:
    """A dispatched workflow: its id, and its members' task ids, stage after stage."""

    id: str
    task_ids: tuple[str, ...]

    def lookup(self) -> WorkflowRecord | None:
        return lookup_workflow(self.id)

    def cancel(self) -> bool:
        return cancel_workflow(self.id)


@dataclass(frozen=True)
class WorkflowRecord:
    """What is known of one workflow.

    `status`: running | succeeded (every member succeeded) | finished (done, some
    group members failed) | failed (a one-task step failed for good, `failed_step`) |
    cancelled. Counts: `pending` (in a stage not sent yet), `running` (sent: queued or
    running), `succeeded`, `failed` (for good: failed, expired or cancelled).
    """

    id: str
    status: str
    name: str
    stage: int
    stages: int
    total: int
    pending: int
    running: int
    succeeded: int
    failed: int
    failed_step: int | None
    task_ids: tuple[str, ...]
    stage_sizes: tuple[int, ...]
    callback_id: str | None
    dispatched_at: datetime | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status != "running"


def store() -> WorkflowStore:
    return get_store().workflows


def _int(fields: Mapping[str, str], name: str, default: int = 0) -> int:
    raw = fields.get(name, "")
    try:
        return int(raw)
    except ValueError:
        return default


def _time(fields: Mapping[str, str], name: str) -> datetime | None:
    raw = _int(fields, name, -1)
    return None if raw < 0 else datetime.fromtimestamp(raw / 1000, tz=UTC)


def record_from(workflow_id: str, fields: Mapping[str, str],
                task_ids: Iterable[str] = ()) -> WorkflowRecord:
    """A `WorkflowRecord` from the workflow's hash fields (and its member ids)."""
    stages = _int(fields, "stages")
    sizes = tuple(_int(fields, f"n:{stage}") for stage in range(stages))
    ids = tuple(task_ids)
    callback = None
    if (stages >= 2 and fields.get(f"kind:{stages - 1}") == "one"
            and fields.get(f"kind:{stages - 2}") == "group" and ids):
        callback = ids[-1]
    failed_step = fields.get("failed_step")
    return WorkflowRecord(
        id=workflow_id, status=fields.get("status", ""), name=fields.get("name", ""),
        stage=_int(fields, "stage"), stages=stages, total=_int(fields, "total"),
        pending=_int(fields, "pending"), running=max(0, _int(fields, "running")),
        succeeded=_int(fields, "succeeded"), failed=_int(fields, "failed"),
        failed_step=None if failed_step is None else _int(fields, "failed_step"),
        task_ids=ids, stage_sizes=sizes, callback_id=callback,
        dispatched_at=_time(fields, "created"), finished_at=_time(fields, "finished"))


def _checked(workflow_id: Any) -> str | None:
    if isinstance(workflow_id, str) and workflow_id.isalnum() and len(workflow_id) <= 64:
        return workflow_id
    return None


def lookup_workflow(workflow_id: str, *, with_task_ids: bool = True) -> WorkflowRecord | None:
    """The record of a workflow; None for an unknown id, or one whose record expired.

    Raises:
        RedisUnavailable: Redis could not be reached.
        UnreadableData: its key holds what is not a workflow (a key of the wrong type).
    """
    checked = _checked(workflow_id)
    if checked is None:
        return None
    try:
        workflows = store()
        fields = workflows.load(checked)
        if fields is None:
            return None
        ids = workflows.members(checked, 0, -1) if with_task_ids else []
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot look workflow {checked!r} up", exc, built_client()) from exc
    except REPLY_ERROR as exc:
        raise UnreadableData(f"workflow {checked!r}", exc) from exc
    return record_from(checked, fields, ids)


def cancel_workflow(workflow_id: str) -> bool:
    """Cancel a running workflow: no later stage is sent, and each member not finished
    yet (queued, running, or waiting for its stage) is cancelled as `cancel(id)` does.
    False for an unknown or finished workflow.

    Raises:
        RedisUnavailable: Redis could not be reached.
    """
    checked = _checked(workflow_id)
    if checked is None:
        return False
    try:
        workflows = store()
        outcome, stage = workflows.cancel(checked, clock.now_ms(),
                                          max(1, int(get_settings().RESULT_TTL)))
        if outcome != "ok":
            return False
        fields = workflows.load(checked) or {}
        start = _int(fields, f"o:{_int(fields, 'stage', int(stage or 0))}")
        ids = workflows.members(checked, start, -1)
        done = workflows.done(checked, list(range(start, start + len(ids))))
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot cancel workflow {checked!r}", exc, built_client()) from exc
    for task_id, finished in zip(ids, done, strict=True):
        if not finished:
            cancel(task_id)
    return True


def parent_result(workflows: WorkflowStore, workflow: Mapping[str, Any]) -> Any:
    """What a member's stage before returned: the step's result, or a group's results
    in order (None for a member that failed); None for the first stage. Read from the
    task records of that stage."""
    stage = workflow.get("k", 0)
    if not stage:
        return None
    fields = workflows.load(workflow["id"])
    if fields is None:
        return None
    before = stage - 1
    offset, size = _int(fields, f"o:{before}"), _int(fields, f"n:{before}")
    ids = workflows.members(workflow["id"], offset, offset + size - 1)
    results = [json_value(result) if status == "succeeded" else None
               for status, result in workflows.record_fields(ids, ("s", "r"))]
    if fields.get(f"kind:{before}") == "one":
        return results[0] if results else None
    return results
