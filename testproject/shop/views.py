import time
from decimal import Decimal, InvalidOperation

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from django_taskrunner import TaskAlreadyDispatched
from testproject.shop.models import Event, Order
from testproject.shop.tasks import (
    always_fails,
    build_report,
    export_orders,
    remind_unpaid,
    say_when,
)

DELAY = 15  # seconds: the delayed button's countdown
# The admin pages the home page links to: (title, URL name).
ADMIN_PAGES = [
    ("Failed tasks", "admin:django_taskrunner_failedtask_changelist"),
    ("Delayed tasks", "admin:django_taskrunner_delayedtask_changelist"),
    ("Unique locks", "admin:django_taskrunner_uniquelock_changelist"),
    ("Queues", "admin:django_taskrunner_queue_changelist"),
    ("Periodic tasks", "admin:django_taskrunner_periodictask_changelist"),
]


def home(request: HttpRequest) -> HttpResponse:
    now = time.time()
    waiting = [d for d in request.session.get("delayed", []) if d["due"] > now - 60]
    return render(request, "shop/home.html", {
        "orders": Order.objects.order_by("-created_at")[:10],
        "events": Event.objects.order_by("-at")[:12],
        "delayed": waiting,
        "admin_pages": ADMIN_PAGES,
        "delay": DELAY,
    })


@require_POST
def unique_twice(request: HttpRequest) -> HttpResponse:
    """Dispatch export_orders twice in a row: the second finds the lock the first took."""
    try:
        first = export_orders.dispatch()
    except TaskAlreadyDispatched as exc:  # an export of an earlier click still holds it
        messages.warning(request, f"Both dispatches refused: an earlier export, task "
                                  f"{exc.holder_id}, still holds the lock.")
        return redirect("home")
    try:
        export_orders.dispatch()
    except TaskAlreadyDispatched as exc:
        messages.success(request, f"First dispatch queued as task {first.id}. Second dispatch "
                                  f"refused (TaskAlreadyDispatched): the lock is held by task "
                                  f"{exc.holder_id}.")
    else:
        messages.error(request, "The second dispatch was accepted: the lock did not hold.")
    return redirect("home")


@require_POST
def delayed(request: HttpRequest) -> HttpResponse:
    """Dispatch say_when to start DELAY seconds from now; the page counts down to it."""
    due = time.time() + DELAY
    label = f"#{len(request.session.get('delayed', [])) + 1}"
    message = say_when.dispatch_delayed({"due": due, "label": label}, delay=DELAY)
    request.session["delayed"] = [*request.session.get("delayed", []),
                                  {"id": message.id, "label": label, "due": due}][-5:]
    messages.success(request, f"Delayed task {label} ({message.id}) is due in {DELAY} s.")
    return redirect("home")


@require_POST
def failing(request: HttpRequest) -> HttpResponse:
    message = always_fails.dispatch({"card": "4000 0000 0000 0002"})
    messages.success(request, f"Task {message.id} dispatched: it fails, is retried once, then "
                              f"becomes a failed task in the admin.")
    return redirect("home")


@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    try:
        total = Decimal(request.POST.get("total", "0"))
    except InvalidOperation:
        total = Decimal("0")
    order = Order.objects.create(email=request.POST.get("email") or "demo@example.com",
                                 total=total)
    remind_unpaid.dispatch_delayed({"order": order.pk}, delay=30)
    messages.success(request, "Order placed: its receipt is sent in the background, and a "
                              "payment reminder is due in 30 seconds.")
    return redirect("home")


@require_POST
def request_report(request: HttpRequest, order_id: int) -> HttpResponse:
    order = get_object_or_404(Order, pk=order_id)
    message = build_report.dispatch({"order": order.pk})
    messages.success(request, f"Report requested (task {message.id}).")
    return redirect("home")
