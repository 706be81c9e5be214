"""The demo's tasks, found by autodiscovery because this file is named tasks.py."""

import logging
import random
import time

from django.utils import timezone

from django_taskrunner import TaskContext, task

logger = logging.getLogger("testproject.shop")


@task(max_retry=3, unique=True, unique_for=300, unique_key=lambda payload: str(payload["order"]))
def send_receipt(payload: dict) -> None:
    """Dispatched by a post_save signal when an order is created; unique per order, so a
    second dispatch for the same order while the first is queued or running is refused."""
    from testproject.shop.models import Order

    order = Order.objects.get(pk=payload["order"])
    time.sleep(0.2)  # pretend to talk to a mail server
    Order.objects.filter(pk=order.pk).update(receipt_sent_at=timezone.now())
    logger.info("receipt sent for order %s to %s", order.pk, order.email)
    record(f"send_receipt: receipt for order {order.pk} sent to {order.email}")


@task(queue="reports", max_retry=2, retry_backoff=1)
def build_report(payload: dict) -> None:
    """Dispatched from a view; fails now and then to show retries and failed tasks."""
    from testproject.shop.models import Order

    if random.random() < 0.3:  # noqa: S311 - a demo failure, not cryptography
        raise RuntimeError("the report service timed out (a demo failure)")
    order = Order.objects.get(pk=payload["order"])
    Order.objects.filter(pk=order.pk).update(report=f"{order.email} spent {order.total}")


@task
def remind_unpaid(payload: dict) -> None:
    """Dispatched 30 seconds after an order, through the delayed set."""
    logger.info("reminder: order %s is waiting for payment", payload["order"])


@task(schedule=60)
def count_orders(payload: object) -> None:
    """A periodic task: the elected leader fires it once a minute."""
    from testproject.shop.models import Order

    logger.info("%d orders so far", Order.objects.count())


@task
def crunch_numbers(payload: dict) -> int:
    """Dispatched by POSTing JSON to /api/crunch/."""
    total = sum(range(int(payload.get("upto", 1000))))
    logger.info("crunched %s", total)
    return total


def record(text: str) -> None:
    """An event on the home page's list."""
    from testproject.shop.models import Event

    Event.objects.create(text=text)


@task(unique=True, unique_for=60, unique_key=lambda payload: "every-order")
def export_orders(payload: object) -> None:
    """The "unique task twice" button: one export at a time. While this one is queued or
    running (8 seconds), another dispatch is refused with TaskAlreadyDispatched."""
    from testproject.shop.models import Order

    time.sleep(8)  # pretend to write a large file
    record(f"export_orders: exported {Order.objects.count()} orders; the lock is free again")


@task
def say_when(payload: dict) -> None:
    """The "delayed task" button: dispatched with a delay, says how late it started."""
    late = time.time() - payload["due"]
    record(f"say_when: the delayed task {payload['label']} started {late:+.2f} s from its "
           f"due time")


@task(max_retry=1, retry_backoff=1)
def always_fails(payload: dict) -> None:
    """The "failing task" button: raises, is retried once, then becomes a failed task in
    the admin (retry it there, or delete it)."""
    raise ValueError(f"the payment service refused the card ({payload['card']})")


@task
def pack_item(payload: dict) -> str:
    """The "workflow" button: a member of a group, packing one item of an order."""
    time.sleep(0.5)
    return f"item {payload['item']}"


@task(takes_context=True)
def ship_parcel(ctx: TaskContext, payload: dict) -> None:
    """The group's callback: runs once, after every pack_item finished."""
    record(f"ship_parcel: parcel {payload['parcel']} shipped with "
           f"{', '.join(ctx.parent_result)} (a workflow: group, then a callback)")


@task(rate_limit="6/m")
def call_partner_api(payload: dict) -> None:
    """The "rate limit" button: at most 6 a minute, across every worker; the rest wait
    (Limits in the admin shows them), they are never failed."""
    record(f"call_partner_api: call {payload['call']} went through the 6/m rate limit")


@task
def write_invoice(payload: dict) -> None:
    """The "outbox" button: dispatched inside a database transaction, through the
    transactional outbox: queued once the transaction commits, never if it rolls back."""
    record(f"write_invoice: invoice {payload['invoice']} written (queued on commit)")
