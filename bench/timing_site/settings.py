"""Django settings of the site bench/delayed_timing.py runs its worker on.

Redis and the key prefix come from the environment the benchmark sets.
"""

import os
import tempfile
from pathlib import Path

BASE_DIR = Path(os.environ.get("BENCH_DIR", tempfile.gettempdir()))
SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_taskrunner",
    "bench.timing_site",
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(BASE_DIR / "bench.sqlite3")}
}
TASKRUNNER = {
    "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "PREFIX": os.environ.get("BENCH_PREFIX", "bench"),
    "LEADER_LEASE": 5,
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_taskrunner": {"handlers": ["console"], "level": "WARNING"}},
}
