import time
from decimal import Decimal, InvalidOperation

from django.apps import apps
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from django_taskrunner import TaskAlreadyDispatched, group
from testproject.shop.models import Event, Order
from testproject.shop.tasks import (
    always_fails,
    build_report,
    call_partner_api,
    export_orders,
    pack_item,
    remind_unpaid,
    say_when,
    ship_parcel,
    write_invoice,
)

DELAY = 15  # seconds: the delayed button's countdown
RATE_BURST = 10  # calls dispatched at once against call_partner_api's 6/m


def admin_pages() -> list[tuple[str, str]]:
    """(title, URL) of every admin page of django_taskrunner, so a new page is linked
    without editing the demo."""
    models = [model for model in apps.get_app_config("django_taskrunner").get_models()
              if admin.site.is_registered(model)]
    return sorted((str(model._meta.verbose_name_plural).capitalize(),
                   reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
                  for model in models)


def home(request: HttpRequest) -> HttpResponse:
    now = time.time()
    waiting = [d for d in request.session.get("delayed", []) if d["due"] > now - 60]
    return render(request, "shop/home.html", {
        "orders": Order.objects.order_by("-created_at")[:10],
        "events": Event.objects.order_by("-at")[:12],
        "delayed": waiting,
        "admin_pages": admin_pages(),
        "rate_burst": RATE_BURST,
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


@require_POST
def workflow(request: HttpRequest) -> HttpResponse:
    """A group of three pack_item tasks side by side, then ship_parcel once, after all."""
    parcel = Event.objects.count() + 1
    handle = group(*[pack_item.s({"item": n}) for n in (1, 2, 3)],
                   then=ship_parcel.s({"parcel": parcel})).dispatch()
    messages.success(request, f"Workflow {handle.id} dispatched: three pack_item tasks, then "
                              f"ship_parcel once they all finished.")
    return redirect("home")


@require_POST
def rate_limited(request: HttpRequest) -> HttpResponse:
    """RATE_BURST calls at once: 6 run this minute, the others wait for the limit."""
    start = Event.objects.count()
    call_partner_api.dispatch_many([{"call": start + n} for n in range(1, RATE_BURST + 1)])
    messages.success(request, f"{RATE_BURST} calls dispatched: 6 run now (6/m), the others "
                              f"wait on the rate limit (see Limits in the admin).")
    return redirect("home")


@require_POST
def outbox(request: HttpRequest) -> HttpResponse:
    """One dispatch in a transaction that commits (queued), one in a transaction that
    rolls back (never queued): the transactional outbox."""
    invoice = Event.objects.count() + 1
    with transaction.atomic():
        message = write_invoice.dispatch_on_commit({"invoice": invoice})
    try:
        with transaction.atomic():
            write_invoice.dispatch_on_commit({"invoice": f"{invoice}-rolled-back"})
            raise RuntimeError("the order could not be saved")  # a demo rollback
    except RuntimeError:
        pass
    messages.success(request, f"Invoice {invoice} queued on commit as task {message.id}; a "
                              f"second dispatch, in a transaction that rolled back, queued "
                              f"nothing.")
    return redirect("home")
