"""deploy/Dockerfile and deploy/compose.yaml: valid, shown verbatim in docs/deployment.md,
and running the commands the README and the docs give (runtasks, migrate)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from tests.docs.markdown_blocks import parse_blocks

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PAGE = ROOT / "docs" / "deployment.md"
DOCKERFILE_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}


def _blocks(lang: str) -> list[str]:
    return [b.text for b in parse_blocks(PAGE.read_text(encoding="utf-8"), PAGE)
            if b.lang == lang]


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    logical = re.sub(r"\\\n", " ", text)  # continuation lines
    return [tuple(line.split(None, 1)) for line in logical.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_page_shows_both_files_as_they_are():
    assert (DEPLOY / "Dockerfile").read_text(encoding="utf-8") in _blocks("dockerfile")
    assert (DEPLOY / "compose.yaml").read_text(encoding="utf-8") in _blocks("yaml")


def test_the_dockerfile_is_made_of_instructions_and_stops_on_sigterm():
    instructions = _dockerfile_instructions()
    assert {name for name, _ in instructions} <= DOCKERFILE_INSTRUCTIONS
    assert instructions[0][0] == "FROM"
    assert ("STOPSIGNAL", "SIGTERM") in instructions


def test_compose_runs_web_worker_valkey_and_postgresql():
    services = _compose()["services"]
    assert set(services) == {"web", "worker", "redis", "db"}
    assert services["redis"]["image"].startswith("valkey/")
    assert services["db"]["image"].startswith("postgres:")
    for name in ("web", "worker"):
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile"
        assert services[name]["environment"]["REDIS_URL"] == "redis://redis:6379/0"


def test_the_worker_and_web_commands_are_the_documented_ones():
    services = _compose()["services"]
    assert shlex.split(services["worker"]["command"]) == ["python", "manage.py", "runtasks"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python manage.py runtasks" in readme and "python manage.py migrate" in readme
    assert "python manage.py migrate --noinput &&" in services["web"]["command"]
    # stop_grace_period above SHUTDOWN_TIMEOUT (30 s), as for systemd's TimeoutStopSec.
    assert int(services["worker"]["stop_grace_period"].removesuffix("s")) > 30
