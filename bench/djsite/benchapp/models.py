"""The row the real-Django benchmark writes (bench/orm.py): one per task run."""

from django.db import models


class BenchRow(models.Model):
    """`n` is the task's number; no unique constraint, so a task run twice shows as two rows."""

    n = models.IntegerField()
    note = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"row {self.pk}: task {self.n}"
