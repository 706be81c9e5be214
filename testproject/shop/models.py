from django.db import models


class Order(models.Model):
    email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    receipt_sent_at = models.DateTimeField(null=True, blank=True)
    report = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"Order {self.pk} for {self.email}"


class Event(models.Model):
    """What the demo's tasks did, newest first on the home page: the worker writes these."""

    at = models.DateTimeField(auto_now_add=True)
    text = models.CharField(max_length=300)

    def __str__(self) -> str:
        return self.text
