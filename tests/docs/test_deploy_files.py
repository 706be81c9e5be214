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
    assert set(services) == {"migrate", "web", "worker", "redis", "db"}
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
    assert shlex.split(services["migrate"]["command"]) == [
        "python", "manage.py", "migrate", "--noinput"]
    # stop_grace_period above SHUTDOWN_TIMEOUT (30 s), as for systemd's TimeoutStopSec.
    assert int(services["worker"]["stop_grace_period"].removesuffix("s")) > 30


def test_the_web_and_the_worker_start_once_migrate_completed():
    services = _compose()["services"]
    assert services["migrate"]["restart"] == "no"  # a one-off: it runs, then exits
    for name in ("web", "worker"):
        needs = services[name]["depends_on"]
        assert needs["migrate"] == {"condition": "service_completed_successfully"}, name
        assert needs["db"] == needs["redis"] == {"condition": "service_healthy"}, name


def test_the_image_collects_the_static_files_before_dropping_root():
    instructions = _dockerfile_instructions()
    runs = [args for name, args in instructions if name == "RUN"]
    collect = next(i for i, (name, args) in enumerate(instructions)
                   if name == "RUN" and "manage.py collectstatic --noinput" in args)
    install = next(i for i, (name, args) in enumerate(instructions)
                   if name == "RUN" and "pip install" in args)
    user = instructions.index(("USER", "nobody"))
    assert install < collect < user, runs
    settings = [b for b in _blocks("python") if b.startswith("# settings.py")]
    assert any("STATIC_ROOT = " in block for block in settings)


def test_the_worker_has_a_healthcheck_with_a_command_that_exists():
    check = _compose()["services"]["worker"]["healthcheck"]
    assert check["test"][:3] == ["CMD", "python", "manage.py"]
    command = check["test"][3]
    assert (ROOT / "django_taskrunner" / "management" / "commands" / f"{command}.py").exists()
    assert f"python manage.py {command}" in PAGE.read_text(encoding="utf-8")


def test_the_site_gets_its_secret_key_hosts_and_debug_from_the_environment():
    for name in ("web", "worker", "migrate"):
        environment = _compose()["services"][name]["environment"]
        assert environment["DEBUG"] == "0", name
        assert environment["SECRET_KEY"] and environment["ALLOWED_HOSTS"], name
    [settings] = [b for b in _blocks("python") if b.startswith("# settings.py")]
    for line in ('SECRET_KEY = os.environ.get("SECRET_KEY"', 'DEBUG = os.environ.get("DEBUG")',
                 'ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS"'):
        assert line in settings, line
