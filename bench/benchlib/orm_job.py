"""The real-Django job every system runs in bench/orm.py: insert one row, read it back.

`orm_job({"i": n})` inserts a `BenchRow` with `n` through the ORM and reads it back by
primary key: two statements, each its own transaction (autocommit). Nothing else: no
Redis, no connection hygiene (that is each system's own, and part of what is measured).
The benchmark counts the rows to time the drain and checks them for exactly-once.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_model: Any = None


def model() -> Any:
    """The model, once Django is set up (the peers' worker processes import this module
    before they set Django up, if they ever do: the first task does it then)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                import django

                django.setup()
                from djsite.benchapp.models import BenchRow

                _model = BenchRow
    return _model


def orm_job(payload: Any) -> None:
    """The benchmark task body."""
    row_class = model()
    row = row_class.objects.create(n=payload["i"], note="bench")
    row_class.objects.get(pk=row.pk)
