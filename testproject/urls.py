from django.contrib import admin
from django.urls import path

from django_taskrunner.views import dispatch_view
from testproject.shop import views

urlpatterns = [
    path("", views.home, name="home"),
    path("orders/", views.place_order, name="place-order"),
    path("orders/<int:order_id>/report/", views.request_report, name="request-report"),
    path("demo/unique-twice/", views.unique_twice, name="unique-twice"),
    path("demo/delayed/", views.delayed, name="delayed"),
    path("demo/failing/", views.failing, name="failing"),
    path("demo/workflow/", views.workflow, name="workflow"),
    path("demo/rate-limited/", views.rate_limited, name="rate-limited"),
    path("demo/outbox/", views.outbox, name="outbox"),
    # A view made by dispatch_view: POST dispatches crunch_numbers and answers JSON 202
    # {"id": ...} (CSRF-protected like any other POST view of the site).
    path("api/crunch/", dispatch_view(
        "testproject.shop.tasks.crunch_numbers",
        payload=lambda request: {"upto": int(request.POST.get("upto", 1000))},
    ), name="api-crunch"),
    path("admin/", admin.site.urls),
]
