"""Django settings of the site bench/admin_pages.py renders the admin pages of.

Redis, the key prefix and the database folder come from the environment the benchmark
sets.
"""

import os
import tempfile
from pathlib import Path

BASE_DIR = Path(os.environ.get("BENCH_DIR", tempfile.gettempdir()))
SECRET_KEY = "benchmark-only-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_taskrunner",
    "bench.admin_site",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "bench.admin_site.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3",
                "NAME": str(BASE_DIR / "admin-bench.sqlite3")}
}
# bench/growth.py failed: a PostgreSQL database of its own.
if os.environ.get("BENCH_PG_NAME"):
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql", "NAME": os.environ["BENCH_PG_NAME"],
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
    }
STATIC_URL = "/static/"
TASKRUNNER = {
    "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "PREFIX": os.environ.get("BENCH_PREFIX", "bench"),
}
# A Redis Cluster instead (`--cluster` of bench/records_scale.py).
if os.environ.get("BENCH_CLUSTER_NODES"):
    del TASKRUNNER["REDIS_URL"]
    TASKRUNNER["CLUSTER_NODES"] = os.environ["BENCH_CLUSTER_NODES"].split(",")
