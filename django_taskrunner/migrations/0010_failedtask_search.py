"""Indexes for the failed-task admin's text search at a million rows.

The admin searches `payload`, `error`, `task_name` and `message_id` with `icontains`,
which Django sends as `UPPER(column::text) LIKE UPPER('%term%')`: no B-tree index can
serve a pattern that starts with `%`, so every search read every row. On PostgreSQL this
adds the `pg_trgm` extension (trusted since PostgreSQL 13: the database's owner may
create it) and a GIN trigram index on `UPPER(column)` of each searched column, which the
planner uses for that very expression (terms of three characters or more). On other
databases (SQLite) nothing changes: the search stays the plain scan.

If the extension cannot be created (a role without the right), the migration goes on
without the indexes and says so: the search works, only slower.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, migrations, transaction

logger = logging.getLogger("django_taskrunner")

SEARCHED = ("payload", "error", "task_name", "message_id")


def index_name(column: str) -> str:
    return f"taskrunner_failed_{column}_trgm"


def add_indexes(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("django_taskrunner", "FailedTask")
                                     ._meta.db_table)
    try:
        with transaction.atomic(using=connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DatabaseError as exc:
        logger.warning("the failed-task search indexes were not created (pg_trgm: %s); the "
                       "admin's search reads every row", exc)
        return
    for column in SEARCHED:
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {index_name(column)} ON {table} "
            f"USING gin (UPPER({schema_editor.quote_name(column)}) gin_trgm_ops)")


def drop_indexes(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for column in SEARCHED:
        schema_editor.execute(f"DROP INDEX IF EXISTS {index_name(column)}")


class Migration(migrations.Migration):

    dependencies = [
        ("django_taskrunner", "0009_outbox"),
    ]

    operations = [
        migrations.RunPython(add_indexes, drop_indexes, elidable=False),
    ]
