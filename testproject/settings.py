"""Settings of the demo site. SQLite by default; PostgreSQL when DATABASE_URL is set
(postgres://user:password@host:port/name, needs `pip install psycopg[binary]`).
Redis: REDIS_URL when set, else the embedded Redis in testproject/.taskrunner/."""

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = os.environ.get("SECRET_KEY", "demo-only-not-secret")
DEBUG = os.environ.get("DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_taskrunner",
    "testproject.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"

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


def database_from_url(url: str) -> dict:
    parts = urlparse(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be postgres://..., not {parts.scheme}://")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {
    "default": database_from_url(os.environ["DATABASE_URL"])
    if os.environ.get("DATABASE_URL")
    else {"ENGINE": "django.db.backends.sqlite3",
          "NAME": os.environ.get("DEMO_DB_PATH") or BASE_DIR / "db.sqlite3",
          # The worker's scheduler writes the periodic task rows the admin edits: an
          # edit's transaction takes the write lock first and waits for it, instead of
          # failing at once with "database is locked" (docs/deployment.md).
          "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"}}
}

STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every TASKRUNNER key with its default (see docs/settings.md).
TASKRUNNER = {
    "REDIS_URL": os.environ.get("REDIS_URL") or None,  # None: the embedded Redis
    "CONNECTION": None,
    "CLUSTER_NODES": None,  # ["host:port", ...] of a Redis Cluster; see docs/cluster.md
    "SHARDS": 1,  # or {"emails": 4}: split a hot queue into 4 streams
    "EMBEDDED_DIR": os.environ.get("DEMO_EMBEDDED_DIR") or BASE_DIR / ".taskrunner",
    "PREFIX": os.environ.get("TASKRUNNER_PREFIX", "taskrunner"),
    "CONSUMER_GROUP": "taskrunner",
    "DEFAULT_QUEUE": "default",
    "RESERVATION_TIMEOUT": 300,
    "BATCH_SIZE": 10,
    "PREFETCH_MS": 20,
    "BLOCK_MS": 1000,
    "MIN_WORKERS": None,
    "MAX_WORKERS": 8,
    "DESIRED_WAIT": 1.0,
    "DESIRED_WAIT_TOLERANCE": None,  # None: half of DESIRED_WAIT
    "TUNING_COOLDOWN": 10,
    "STATS_INTERVAL": 1.0,
    "STATS_WINDOW": 200,
    "SHUTDOWN_TIMEOUT": 30,
    "ASYNC_CONCURRENCY": 100,
    "EAGER": False,
    "LEADER_LEASE": 10,
    "DELETE_ON_ACK": True,
    "FAILED_TASK_HANDLER": None,
    "LONG_QUEUE_HOOK": None,
    "LONG_QUEUE_THRESHOLD": 60,
    "LONG_QUEUE_COOLDOWN": 300,
    "METRICS_TOKEN": os.environ.get("METRICS_TOKEN") or None,
    "TIME_LIMIT_GRACE": 5,
    "PROCESSES": 1,
    "MAX_TASKS_PER_CHILD": None,
    "MAX_MEMORY_PER_CHILD": None,
    "WORKER_LOST_AFTER": 15,
    "DEAD_CONSUMER_TIMEOUT": None,
    "RESULT_TTL": 86400,
    "FINISHED_LIST_SIZE": 10_000,
    "QUEUE_FORGET_AFTER": 86400,
    "SOCKET_TIMEOUT": 10,
    "CONNECT_TIMEOUT": 5,
    "OUTBOX": True,
    "OUTBOX_WARN_AGE": 300,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_taskrunner": {"handlers": ["console"], "level": "INFO"},
        "testproject": {"handlers": ["console"], "level": "INFO"},
    },
}
