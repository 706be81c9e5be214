from django.contrib import admin
from django.urls import path

from django_taskrunner.stats.metrics import metrics_view
from django_taskrunner.views import dispatch_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("dispatch/noop/", dispatch_view("tests.testapp.tasks.noop"), name="dispatch-noop"),
    path("dispatch/unique-order/", dispatch_view("tests.testapp.tasks.unique_order"),
         name="dispatch-unique-order"),
    path("dispatch/nightly-report/",
         dispatch_view("tests.testapp.tasks.noop", task_id="nightly-report"),
         name="dispatch-nightly-report"),
    path("metrics/", metrics_view, name="metrics"),
]
