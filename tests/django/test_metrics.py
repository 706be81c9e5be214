"""The Prometheus exposition parses with prometheus_client's own parser and shows the figures."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from django_taskrunner import get_redis
from django_taskrunner.conf import get_settings
from django_taskrunner.stats.metrics import leader_available, serve_metrics
from django_taskrunner.store import keys
from tests.testapp.tasks import always_fails, sleep_50ms
from tests.worker_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a-long-enough-metrics-token"
SLEEP_50 = "tests.testapp.tasks.sleep_50ms"
FAILS = "tests.testapp.tasks.always_fails"


def parse(text: str) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted labels: value}}, from the library's parser."""
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = (
                sample.value)
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples[name][tuple(sorted(labels.items()))]


@pytest.fixture
def workload(run_burst, virtual_run_time):
    """Ten 50 ms tasks and one task failing after two retries ran; 7 more wait."""
    sleep_50ms.dispatch_many({"n": n} for n in range(10))
    always_fails.dispatch({"n": 1})
    run_burst("--queue", "default", "--concurrency", "4")
    sleep_50ms.dispatch_many({"n": n} for n in range(7))


def test_staff_see_queue_task_and_histogram_figures(workload, client):
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))

    response = client.get("/metrics/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = parse(response.content.decode())
    assert value(samples, "taskrunner_queue_length", queue="default") == 7
    assert value(samples, "taskrunner_queue_lag", queue="default") == 7
    assert value(samples, "taskrunner_queue_pending", queue="default") == 0
    assert value(samples, "taskrunner_queue_lag_seconds", queue="default") >= 0
    # 10 tasks and 3 attempts of the failing one were picked up (retries go back on the stream)
    assert value(samples, "taskrunner_queue_pickup_delay_seconds_count", queue="default") == 13
    assert value(samples, "taskrunner_queue_pickup_delay_seconds_bucket", queue="default",
                 le="+Inf") == 13
    assert value(samples, "taskrunner_queue_pickup_delay_seconds_sum", queue="default") >= 0
    assert value(samples, "taskrunner_queue_length", queue="other") == 0
    assert value(samples, "taskrunner_tasks_run_total", queue="default", task=SLEEP_50) == 10
    assert value(samples, "taskrunner_tasks_succeeded_total", queue="default",
                 task=SLEEP_50) == 10
    assert value(samples, "taskrunner_tasks_run_total", queue="default", task=FAILS) == 3
    assert value(samples, "taskrunner_tasks_retried_total", queue="default", task=FAILS) == 2
    assert value(samples, "taskrunner_tasks_failed_total", queue="default", task=FAILS) == 1
    assert value(samples, "taskrunner_workers", queue="default") == 0
    # The histogram: cumulative buckets, count and sum of ten ~50 ms attempts
    labels = {"queue": "default", "task": SLEEP_50}
    assert value(samples, "taskrunner_task_run_seconds_count", **labels) == 10
    assert value(samples, "taskrunner_task_run_seconds_bucket", le="+Inf", **labels) == 10
    assert value(samples, "taskrunner_task_run_seconds_bucket", le="0.025", **labels) == 0
    assert value(samples, "taskrunner_task_run_seconds_bucket", le="0.25", **labels) == 10
    assert 0.5 <= value(samples, "taskrunner_task_run_seconds_sum", **labels) < 0.8


def test_the_leader_is_shown_only_when_leader_election_exists(workload, client):
    settings = get_settings()
    get_redis().set(
        keys.leader_key(settings.PREFIX, settings.CONSUMER_GROUP), "host-1-abc", px=10_000)
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))

    samples = parse(client.get("/metrics/").content.decode())

    if leader_available():
        assert value(samples, "taskrunner_leader", group=settings.CONSUMER_GROUP,
                     holder="host-1-abc") == 1
    else:
        assert "taskrunner_leader" not in samples


def test_anonymous_and_non_staff_users_are_refused(client):
    assert client.get("/metrics/").status_code == 403
    client.force_login(User.objects.create_user("someone", password="pw"))
    assert client.get("/metrics/").status_code == 403
    assert client.post("/metrics/").status_code == 405


def test_a_scraper_with_the_token_may_read_and_a_wrong_token_may_not(taskrunner_settings,
                                                                     client):
    taskrunner_settings(METRICS_TOKEN=TOKEN)

    assert client.get("/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert client.get("/metrics/", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics/", HTTP_AUTHORIZATION=TOKEN).status_code == 403


def test_without_a_token_setting_no_bearer_is_accepted(client):
    assert client.get("/metrics/", HTTP_AUTHORIZATION="Bearer ").status_code == 403
    assert client.get("/metrics/", HTTP_AUTHORIZATION="Bearer None").status_code == 403


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_metrics_port_serves_the_same_exposition(workload):
    port = free_port()
    stop = serve_metrics(port, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    finally:
        stop()
    samples = parse(text)
    assert value(samples, "taskrunner_tasks_run_total", queue="default", task=SLEEP_50) == 10
    assert value(samples, "taskrunner_queue_length", queue="default") == 7


def test_runtasks_metrics_port_serves_live_worker_figures(spawn_worker):
    # Given a real worker process serving metrics
    port = free_port()
    proc = spawn_worker("--queue", "default", "--concurrency", "3", "--metrics-port", str(port))
    text = ""

    def shows_its_threads() -> bool:
        nonlocal text
        assert proc.poll() is None, "the worker exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                text = answer.read().decode()
        except OSError:
            return False
        return value(parse(text), "taskrunner_worker_threads", queue="default") == 3

    try:
        wait_for(shows_its_threads, 20, 0.1)
    finally:
        proc.terminate()
        proc.wait(20)

    # Then its endpoint showed itself as a live worker with three threads
    samples = parse(text)
    assert value(samples, "taskrunner_workers", queue="default") == 1
    assert value(samples, "taskrunner_worker_threads", queue="default") == 3
