"""Indexes in the failed-task admin's order, so its pages stay index reads at a million rows.

The list is ordered by `-failed_at, -id`, alone or under a filter on the task name, the
queue or the error class. One B-tree per case, its columns in that order, lets the
database read a page (and the admin's capped count) as a range of one index instead of
sorting every matching row. The four single-column indexes they replace (and the
`varchar_pattern_ops` copies PostgreSQL kept of three of them) served nothing else: the
filters' value lists read the leading column of the new ones. The new indexes are made
before the old ones are dropped. Plain B-trees: the same on SQLite and PostgreSQL.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("django_taskrunner", "0010_failedtask_search"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="failedtask",
            index=models.Index(fields=["-failed_at", "-id"], name="taskrunner_failed_recent"),
        ),
        migrations.AddIndex(
            model_name="failedtask",
            index=models.Index(fields=["task_name", "-failed_at", "-id"],
                               name="taskrunner_failed_task_recent"),
        ),
        migrations.AddIndex(
            model_name="failedtask",
            index=models.Index(fields=["queue", "-failed_at", "-id"],
                               name="taskrunner_failed_queue_recent"),
        ),
        migrations.AddIndex(
            model_name="failedtask",
            index=models.Index(fields=["error_class", "-failed_at", "-id"],
                               name="taskrunner_failed_error_recent"),
        ),
        migrations.AlterField(
            model_name="failedtask",
            name="error_class",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AlterField(
            model_name="failedtask",
            name="failed_at",
            field=models.DateTimeField(),
        ),
        migrations.AlterField(
            model_name="failedtask",
            name="queue",
            field=models.CharField(max_length=100),
        ),
        migrations.AlterField(
            model_name="failedtask",
            name="task_name",
            field=models.CharField(max_length=255),
        ),
    ]
