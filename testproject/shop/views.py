from decimal import Decimal, InvalidOperation

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from testproject.shop.models import Order
from testproject.shop.tasks import build_report, remind_unpaid


def home(request: HttpRequest) -> HttpResponse:
    orders = Order.objects.order_by("-created_at")[:20]
    return render(request, "shop/home.html", {"orders": orders})


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
