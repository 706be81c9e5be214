"""The server check (store/server.py): a server that cannot run the app is one clear
error at start-up; newer commands are used where the server has them, else the fallback.

The crippled servers are real ones started with a command renamed away
(`--rename-command XPENDING ""`), which is how a proxy or a locked-down host behaves.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest
import redis

from django_taskrunner.checks import check_taskrunner_server
from django_taskrunner.store import Store, server
from django_taskrunner.store.server import Features, ServerUnsupported, check_server
from tests.conftest import ROOT, start_private_redis, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def crippled_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A private server of the kind the run uses, with the commands in `param` renamed away."""
    workdir = tempfile.mkdtemp(prefix="trtest-crippled-")
    extra: tuple[str, ...] = ()
    for command in request.param:
        extra += ("--rename-command", command, "")
    proc, url = start_private_redis(workdir, extra=extra)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_test_server_passes_and_is_named_as_info_says(r, prefix):
    found = check_server(r, prefix)
    info = r.info("server")
    assert found is not None
    assert found.name == info.get("server_name", "redis")
    assert found.version == info.get(f"{found.name}_version", info["redis_version"])
    assert not r.keys(f"{prefix}:*")  # the probes write nothing


def test_valkey_is_named_by_its_own_version_and_redis_6_0_is_too_old():
    valkey = server.parse_info({"redis_version": "7.2.4", "server_name": "valkey",
                                "valkey_version": "9.1.2"})
    assert valkey.label == "Valkey 9.1.2"
    assert not server.too_old(valkey)
    assert server.too_old(server.parse_info({"redis_version": "6.0.20"}))
    assert not server.too_old(server.parse_info({"redis_version": "6.2.0"}))
    assert server.version_tuple("8.2.1-rc1") == (8, 2, 1)


@pytest.mark.parametrize("crippled_server", [("XPENDING",)], indirect=True)
def test_a_server_without_streams_is_one_clear_error(crippled_server, prefix):
    client = redis.Redis.from_url(crippled_server)
    with pytest.raises(ServerUnsupported, match="no streams") as caught:
        check_server(client, prefix)
    assert "Redis 6.2 or Valkey 7.2" in str(caught.value)
    client.close()


@pytest.mark.parametrize("crippled_server", [("EVALSHA",)], indirect=True)
def test_runtasks_on_a_server_refusing_evalsha_exits_with_one_message(crippled_server, prefix):
    proc = subprocess.run(  # noqa: S603 - our own arguments
        [sys.executable, "-m", "django", "runtasks", "--burst"], cwd=ROOT,
        env=worker_env(prefix, crippled_server), capture_output=True, text=True, timeout=60,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "EVALSHA" in output and "Redis 6.2 or Valkey 7.2" in output
    assert "Traceback" not in output


@pytest.mark.parametrize("crippled_server", [("EVALSHA",)], indirect=True)
def test_the_deploy_check_reports_the_unusable_server(crippled_server, taskrunner_settings):
    assert check_taskrunner_server() == []  # the run's own server is fine
    taskrunner_settings(REDIS_URL=crippled_server)
    errors = check_taskrunner_server()
    assert [error.id for error in errors] == ["taskrunner.E020"]
    assert "EVALSHA" in errors[0].msg


@pytest.mark.parametrize("crippled_server", [("COMMAND",)], indirect=True)
def test_a_server_refusing_command_gets_the_commands_every_server_has(crippled_server):
    client = redis.Redis.from_url(crippled_server)
    assert server.features(client) == Features(xackdel=False)
    client.close()


def test_features_are_asked_once_per_client(redis_target):
    client = redis_target.client()
    first = server.features(client)
    assert first.xackdel == ("xackdel" in _command_names(client))
    server.set_features(client, Features(xackdel=not first.xackdel))
    assert server.features(client).xackdel is not first.xackdel  # kept, not asked again
    client.close()


def _command_names(client) -> set[str]:
    """Every command the server knows (COMMAND), lower case."""
    return {name.lower() for name in client.command()}


def _acked_and_deleted(redis_target, prefix: str, xackdel: bool) -> None:
    """Ack two of three read entries through Broker.ack; they leave the PEL and stream."""
    client = redis_target.client()
    server.set_features(client, Features(xackdel=xackdel))
    broker = Store(client, prefix, "workers", delete_on_ack=True).streams
    stream = broker.stream("default")
    ids = [client.xadd(stream, {"m": f"body-{n}"}).decode() for n in range(3)]
    client.xgroup_create(stream, "workers", id="0")
    client.xreadgroup("workers", "c1", {stream: ">"}, count=3)
    broker.ack("default", ids[:2])
    assert client.xpending(stream, "workers")["pending"] == 1
    assert [entry[0].decode() for entry in client.xrange(stream)] == [ids[2]]
    client.close()


def test_ack_without_xackdel_acks_and_deletes(redis_target, prefix):
    _acked_and_deleted(redis_target, prefix, xackdel=False)


def test_ack_with_xackdel_acks_and_deletes(redis_target, prefix, r):
    if "xackdel" not in _command_names(r):
        pytest.skip(f"{server.read_info(r).label} has no XACKDEL (Redis 8.2+): only the "
                    f"XACK + XDEL fallback can run here")
    _acked_and_deleted(redis_target, prefix, xackdel=True)
