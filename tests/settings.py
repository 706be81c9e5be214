"""Settings of the test suite: a file SQLite database (worker threads and processes
share it), or PostgreSQL from TASKRUNNER_TEST_DATABASE_URL, and Redis from the
environment (set by tests/conftest.py)."""

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only-not-secret"
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
    "tests.testapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

import django  # noqa: E402

if django.VERSION < (6, 0):
    try:
        import django_tasks  # noqa: F401 - the Tasks framework backport, on Django 5.2
    except ImportError:
        pass
    else:
        INSTALLED_APPS.append("django_tasks")

TASKS = {
    "default": {
        "BACKEND": "django_taskrunner.backends.TaskRunnerBackend",
        "QUEUES": ["default", "framework"],
        "OPTIONS": {"RESULT_TTL": 3600},
    }
}

ROOT_URLCONF = "tests.testapp.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

_db_dir = Path(os.environ.get("TASKRUNNER_TEST_DB_DIR", BASE_DIR))
# TASKRUNNER_TEST_DATABASE_URL=postgres://user[:password]@host:port/name runs the suite on
# PostgreSQL (scripts/test --databases); the test database is test_<name>_<pid>, so
# runs at the same time do not collide. A worker subprocess gets the test database's
# name in TASKRUNNER_TEST_DB_NAME.
_database_url = os.environ.get("TASKRUNNER_TEST_DATABASE_URL")
if _database_url:
    _parsed = urlsplit(_database_url)
    _name = unquote(_parsed.path.lstrip("/")) or "taskrunner"
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("TASKRUNNER_TEST_DB_NAME", _name),
            "USER": unquote(_parsed.username or ""),
            "PASSWORD": unquote(_parsed.password or ""),
            "HOST": _parsed.hostname or "",
            "PORT": str(_parsed.port or ""),
            "TEST": {"NAME": f"test_{_name}_{os.getpid()}"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            # A subprocess worker started by a test is pointed at the test database.
            "NAME": os.environ.get("TASKRUNNER_TEST_DB_NAME", str(_db_dir / "db.sqlite3")),
            "TEST": {"NAME": str(_db_dir / f"test-db-{os.getpid()}.sqlite3")},
            "OPTIONS": {"timeout": 30},
        }
    }

STATIC_URL = "/static/"

# A worker subprocess of a test on the local Redis Cluster (tests/cluster/) gets its nodes.
_cluster_nodes = os.environ.get("TASKRUNNER_TEST_CLUSTER_NODES")

TASKRUNNER = {
    "REDIS_URL": None if _cluster_nodes else os.environ.get("TASKRUNNER_TEST_REDIS_URL") or None,
    "CLUSTER_NODES": _cluster_nodes.split(",") if _cluster_nodes else None,
    "EMBEDDED_DIR": os.environ.get("TASKRUNNER_TEST_EMBEDDED_DIR") or None,
    "PREFIX": os.environ.get("TASKRUNNER_TEST_PREFIX", "trtest"),
    "BLOCK_MS": 200,
    "SHUTDOWN_TIMEOUT": 10,
    # A test's own overrides for a worker subprocess, as JSON: {"LEADER_LEASE": 1}.
    **json.loads(os.environ.get("TASKRUNNER_TEST_SETTINGS", "{}")),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    # INFO, as a project that wants the worker's lines sets it; a test of the worker's
    # logging can spawn one with another level (runtasks respects this one).
    "loggers": {"django_taskrunner": {
        "handlers": ["console"], "level": os.environ.get("TASKRUNNER_TEST_LOG_LEVEL", "INFO"),
    }},
}
