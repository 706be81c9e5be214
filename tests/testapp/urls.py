from django.contrib import admin
from django.urls import path

from django_taskrunner.metrics import metrics_view
from django_taskrunner.views import dispatch_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("dispatch/noop/", dispatch_view("tests.testapp.tasks.noop"), name="dispatch-noop"),
    path("metrics/", metrics_view, name="metrics"),
]
