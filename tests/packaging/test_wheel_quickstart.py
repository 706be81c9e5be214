"""The package as a newcomer gets it: the built sdist and wheel pass `twine check`, and the
README's quick start works, step by step, with the wheel in a fresh virtual environment
and a project from `django-admin startproject`.

The steps (settings, tasks.py, commands) are read from README.md itself, so the README
cannot drift from what is tested. pip installs the dependencies from the configured index.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import Block, parse_blocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICK_START = "## Quick start in your own project"

pytestmark = pytest.mark.slow


def quick_start_blocks() -> list[Block]:
    """The fenced blocks of the README's quick-start section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(QUICK_START):]
    section = section[:section.index("\n## ", len(QUICK_START))]
    return parse_blocks(section, README)


def _block(path: str) -> str:
    [text] = [b.text for b in quick_start_blocks() if b.path == path]
    return text


def _commands(first_word: str) -> list[list[str]]:
    """The quick start's bash lines that start with `first_word` (comments dropped)."""
    lines = [line for b in quick_start_blocks() if b.kind == "bash"
             for line in b.text.splitlines()]
    return [words for line in lines if (words := shlex.split(line, comments=True))
            and words[0] == first_word]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,  # noqa: S603
                            timeout=timeout)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist and wheel, built from the working tree as a release would be."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out),
          str(ROOT)], cwd=ROOT, timeout=300)
    return out


def test_the_sdist_and_wheel_pass_twine_check(dist):
    files = sorted(str(p) for p in dist.iterdir())
    assert sorted(Path(f).suffix for f in files) == [".gz", ".whl"]
    _run([sys.executable, "-m", "twine", "check", "--strict", *files], cwd=dist)


def test_the_readme_quick_start_works_with_the_built_wheel(dist):
    # A short folder: the embedded Redis' unix socket path must stay under ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="trqs", dir="/tmp") as tmp:  # noqa: S108
        work = Path(tmp)
        venv.EnvBuilder(with_pip=True).create(work / "venv")
        python = str(work / "venv" / "bin" / "python")
        [wheel] = dist.glob("*.whl")
        # Nothing of this checkout or of the test run leaks in (PYTHONPATH, settings).
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("DJANGO_", "PYTHON", "TASKRUNNER"))}
        env["PATH"] = f"{work / 'venv' / 'bin'}:{env.get('PATH', '')}"
        # The README's install line, with the wheel in place of the clone.
        [install] = [w for w in _commands("pip") if w[1] == "install"]
        assert install[2].startswith("./django-taskrunner[")
        extras = install[2][install[2].index("["):]
        _run([python, "-m", "pip", "install", "--quiet", f"{wheel}{extras}"], cwd=work,
             env=env, timeout=300)
        try:
            _quick_start(work, python, env)
        finally:
            subprocess.run([python, "-c", "import sys; from django_taskrunner.store.embedded "  # noqa: S603
                            "import stop_server; stop_server(sys.argv[1])",
                            str(work / "mysite" / ".taskrunner")], cwd=work, env=env,
                           capture_output=True, timeout=30)


def _quick_start(work: Path, python: str, env: dict[str, str]) -> None:
    [startproject] = _commands("django-admin")
    assert startproject == ["django-admin", "startproject", "mysite"]
    _run([str(work / "venv" / "bin" / "django-admin"), *startproject[1:]], cwd=work, env=env)
    site = work / "mysite"
    manage = [w for w in _commands("python") if w[:2] == ["python", "manage.py"]]
    assert [w[2] for w in manage] == ["startapp", "migrate", "shell", "runtasks"]
    for words in manage:
        if words[2] == "startapp":
            _run([python, *words[1:]], cwd=site, env=env)
            # The app exists now: the README's settings and tasks.py go in.
            with open(site / "mysite" / "settings.py", "a") as settings:
                settings.write("\n" + _block("mysite/settings.py"))
            (site / "shop" / "tasks.py").write_text(_block("shop/tasks.py"))
            continue
        result = _run([python, *words[1:]], cwd=site, env=env)
    # The last command: runtasks --burst ran the task, on the embedded Redis it announced.
    assert words[2:] == ["runtasks", "--burst"]
    assert "Hello, Ada!" in result.stdout
    assert f"data in {site / '.taskrunner'}" in result.stderr
    assert "burst: every queue is empty, stopping" in result.stderr
