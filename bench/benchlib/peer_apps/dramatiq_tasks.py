"""Dramatiq on its Redis broker, default middleware (and Django's connection hygiene)."""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from benchlib.job import job as run_job
from benchlib.orm_job import orm_job
from django.db import close_old_connections
from dramatiq.brokers.redis import RedisBroker


class DbConnections(dramatiq.Middleware):
    """bench/orm.py: what django_dramatiq's DbConnectionsMiddleware does,
    close_old_connections() before and after each message."""

    def before_process_message(self, broker: object, message: Any) -> None:
        if message.actor_name == "orm":  # the no-op job of bench/peers.py goes without
            close_old_connections()

    def after_process_message(self, broker: object, message: Any, *,
                              result: object = None, exception: object = None) -> None:
        if message.actor_name == "orm":
            close_old_connections()


broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
broker.add_middleware(DbConnections())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def job(payload: dict) -> None:
    run_job(payload)


@dramatiq.actor(queue_name="bench", actor_name="orm")
def orm(payload: dict) -> None:
    orm_job(payload)
