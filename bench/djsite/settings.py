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
TASKRUNNER = {"REDIS_URL": os.environ.get("BENCH_REDIS_URL"), "PREFIX": "bench",
              # bench/records.py compares task records on and off (0)
              "RESULT_TTL": int(os.environ.get("BENCH_RESULT_TTL", "86400")),
              "ASYNC_CONCURRENCY": int(os.environ.get("BENCH_ASYNC_CONCURRENCY", "100"))}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_taskrunner": {"level": "WARNING"}},
}
