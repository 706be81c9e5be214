"""Dispatch send_receipt whenever an order is created, once the transaction commits."""

from django.db.models.signals import post_save

from django_taskrunner import dispatch_on
from testproject.shop.models import Order
from testproject.shop.tasks import send_receipt

dispatch_on(
    post_save, send_receipt, sender=Order,
    payload=lambda instance, **kwargs: {"order": instance.pk},
    when=lambda created, **kwargs: created,
)
