"""The KEDA ScaledObject of docs/deployment.md: it parses, names the stream and consumer
group of the default settings, and the lag KEDA reads there (XINFO GROUPS) is the
`waiting` figure `taskrunner_stats --json` prints."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from django_taskrunner import dispatch_many
from django_taskrunner.conf import DEFAULTS
from django_taskrunner.store import get_store, keys
from tests.docs.markdown_blocks import parse_blocks
from tests.testapp.tasks import noop

PAGE = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"

pytestmark = pytest.mark.django_db


def scaled_object() -> dict:
    blocks = [yaml.safe_load(block.text) for block in
              parse_blocks(PAGE.read_text(encoding="utf-8"), PAGE) if block.lang == "yaml"]
    [found] = [doc for doc in blocks if isinstance(doc, dict)
               and doc.get("kind") == "ScaledObject"]
    return found


def test_the_scaled_object_reads_the_lag_taskrunner_stats_prints(r) -> None:
    [trigger] = scaled_object()["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "redis-streams" and int(meta["lagCount"]) >= 1
    default_prefix = DEFAULTS["PREFIX"].default
    assert meta["stream"] == keys.stream_key(default_prefix, "default")
    assert meta["consumerGroup"] == DEFAULTS["CONSUMER_GROUP"].default
    # Given 7 messages, 2 of them delivered to a worker and not acked
    dispatch_many(noop, [{"n": n} for n in range(7)])
    broker = get_store().streams
    broker.ensure_group("default")
    broker.read("default", "a-worker", 2, None)
    # Then the lag KEDA reads on the test's stream is what taskrunner_stats prints
    stream = meta["stream"].replace(default_prefix, broker.prefix, 1)
    [group] = [g for g in r.xinfo_groups(stream) if g["name"].decode() == broker.group]
    out = io.StringIO()
    call_command("taskrunner_stats", "-Q", "default", "--json", stdout=out)
    [printed] = json.loads(out.getvalue())
    assert group["lag"] == 5
    assert printed["queue"] == "default" and printed["waiting"] == group["lag"], printed
