"""A minimal Django site for the benchmark: the app, one task module, Redis from the env."""

import os
import tempfile
from pathlib import Path

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_taskrunner", "djsite.benchapp"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DB") or str(Path(tempfile.gettempdir()) / "bench.sqlite3"),
    }
}
# bench/orm.py: PostgreSQL (BENCH_PG_NAME, on BENCH_PG_HOST/PORT/USER), CONN_MAX_AGE from
# BENCH_CONN_MAX_AGE (unset: Django's default, a connection per request or task).
if os.environ.get("BENCH_PG_NAME"):
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["BENCH_PG_NAME"],
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
    }
    if os.environ.get("BENCH_CONN_MAX_AGE"):
        DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ["BENCH_CONN_MAX_AGE"])
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKRUNNER = {"REDIS_URL": os.environ.get("BENCH_REDIS_URL"), "PREFIX": "bench",
              # bench/records.py compares task records on and off (0)
              "RESULT_TTL": int(os.environ.get("BENCH_RESULT_TTL", "86400")),
              # ... and the finished index on and off (0)
              "FINISHED_LIST_SIZE": int(os.environ.get("BENCH_FINISHED_LIST_SIZE", "10000")),
              "ASYNC_CONCURRENCY": int(os.environ.get("BENCH_ASYNC_CONCURRENCY", "100"))}
if os.environ.get("BENCH_BATCH_SIZE"):  # messages per read; the default is the app's
    TASKRUNNER["BATCH_SIZE"] = int(os.environ["BENCH_BATCH_SIZE"])
# bench/queues_growth.py: the size of redis-py's connection pool (in the URL, as a user sets
# it; unset: redis-py's default), and what a user sets to lower the idle cost
if os.environ.get("BENCH_MAX_CONNECTIONS") and TASKRUNNER["REDIS_URL"]:
    TASKRUNNER["REDIS_URL"] += f"?max_connections={int(os.environ['BENCH_MAX_CONNECTIONS'])}"
if os.environ.get("BENCH_BLOCK_MS"):
    TASKRUNNER["BLOCK_MS"] = int(os.environ["BENCH_BLOCK_MS"])
if os.environ.get("BENCH_STATS_INTERVAL"):
    TASKRUNNER["STATS_INTERVAL"] = float(os.environ["BENCH_STATS_INTERVAL"])
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_taskrunner": {"level": "WARNING"}},
}
