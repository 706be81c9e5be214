"""Step: turn the entry's body into a usable message, or record it as failed.

Any entry at all ends here as a message whose fields are all usable (a lock it names is
a unique lock of this shard) or as one failed row, and is acked: nothing an entry holds
can make it stay pending, run twice or stop the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

# Raw bodies kept in a FailedTask row for a message that could not be decoded.
RAW_BODY_LIMIT = 64 * 1024


def decode(executor: Executor, run: Run) -> bool:
    """Set `run.message`; False after acking a deleted entry or recording a bad one."""
    delivery = run.delivery
    if delivery.body is None:  # deleted from the stream while pending
        executor.ack(delivery.shard, delivery.stream_id)
        return False
    try:
        message = TaskMessage.from_json(delivery.body, stream_id=delivery.stream_id)
        message.check_lock_key(executor.broker.prefix, delivery.shard)
    except Exception as exc:  # noqa: BLE001 - bad input is a failed row, never a crash
        undecodable(executor, run, delivery.body, exc)
        return False
    # The stream it was read from is authoritative for the queue; the shard stays on
    # the delivery, where the retry, the ack and the lock release find it.
    message.queue = delivery.queue
    run.message = message
    return True


def undecodable(executor: Executor, run: Run, body: bytes, exc: Exception) -> None:
    """Record an entry that is not a usable message, under a placeholder id, and ack it.

    The row keeps the start of the raw body. Its task name stays empty even when the
    body names one (the error says which): the body is not that task's payload, so the
    admin's retry must not dispatch the task with it.
    """
    if not isinstance(exc, InvalidTaskPayload):
        exc = InvalidTaskPayload(f"message cannot be decoded: {type(exc).__name__}: {exc}")
    raw = body[:RAW_BODY_LIMIT].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    delivery = run.delivery
    run.message = TaskMessage(id=f"{delivery.stream_id}@{delivery.shard}", task_name="",
                              queue=delivery.queue, payload=None, stream_id=delivery.stream_id)
    executor.record_and_ack(run, exc, attempts=0, payload=raw)
