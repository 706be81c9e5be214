"""A schedule kept in the database, so the admin's periodic tasks page has one to show
(count_orders also runs every minute from its @task(schedule=60), in code)."""

from django.db import migrations


def add_schedule(apps, schema_editor):
    PeriodicTask = apps.get_model("django_taskrunner", "PeriodicTask")
    PeriodicTask.objects.get_or_create(
        name="Count the orders every morning",
        defaults={"task_name": "testproject.shop.tasks.count_orders", "cron": "0 6 * * *"})


def remove_schedule(apps, schema_editor):
    PeriodicTask = apps.get_model("django_taskrunner", "PeriodicTask")
    PeriodicTask.objects.filter(name="Count the orders every morning").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("shop", "0002_event"),
        ("django_taskrunner", "0002_periodictask_delayedtask"),
    ]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
