"""The docs example runner itself: it runs what the convention says, and fails loudly."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from django.apps import apps

from tests.docs.markdown_blocks import parse_blocks
from tests.docs.page_runner import ExampleFailed, run_page
from tests.internals import registered_names

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

FENCE = "```"


def page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text).replace("'''", FENCE))
    return path


def test_each_block_gets_the_kind_its_first_line_says(tmp_path):
    text = textwrap.dedent("""\
        '''python
        # shop/tasks.py
        x = 1
        '''
        '''python
        # settings.py
        TASKRUNNER = {}
        '''
        '''python
        # shop/tests.py
        '''
        '''python
        # celery (for comparison)
        app.send_task("x")
        '''
        '''python
        >>> 1 + 1
        2
        '''
        '''python
        print("hi")
        '''
        1. a list item:

           '''bash
           python manage.py check
           '''
        ''''markdown
        '''python
        not a block of its own
        '''
        ''''
        '''ini
        [Unit]
        '''
        """).replace("'''", FENCE)
    blocks = parse_blocks(text, Path("page.md"))
    assert [b.kind for b in blocks] == ["file", "settings", "test-file", "comparison",
                                        "doctest", "code", "bash", "other", "other"]
    assert blocks[0].path == "shop/tasks.py" and blocks[0].lineno == 2
    assert blocks[6].text == "python manage.py check\n"  # dedented out of the list item


def test_a_page_task_is_run_by_the_burst_worker_against_the_test_redis(tmp_path, r, prefix):
    run_page(page(tmp_path, """\
        '''python
        # shop/tasks.py
        from django_taskrunner import get_redis, task
        from django_taskrunner.conf import get_settings

        @task
        def mark(payload):
            get_redis().set(f"{get_settings().PREFIX}:mark", payload)
        '''

        '''python
        from django.core.management import call_command
        from shop.tasks import mark

        mark.dispatch("done")
        call_command("runtasks", "--burst")
        '''
        """), tmp_path / "site")
    assert r.get(f"{prefix}:mark") == b"done"


def test_the_page_site_is_taken_down_afterwards(tmp_path):
    before = registered_names()
    run_page(page(tmp_path, """\
        '''python
        # shop/tasks.py
        from django_taskrunner import task

        @task
        def only_here(payload): ...
        '''
        """), tmp_path / "site")
    assert registered_names() == before
    assert "shop" not in sys.modules and "shop.tasks" not in sys.modules
    assert not apps.is_installed("shop") and "shop" not in apps.all_models


def test_a_doctest_with_the_wrong_output_fails_naming_page_and_line(tmp_path):
    path = page(tmp_path, """\
        Text.

        '''python
        >>> 1 + 1
        3
        '''
        """)
    with pytest.raises(ExampleFailed, match=r"page\.md:4: the doctest block failed"):
        run_page(path, tmp_path / "site")


def test_an_exception_in_a_code_block_fails_with_its_page_line(tmp_path):
    path = page(tmp_path, """\
        '''python
        x = 1
        raise ValueError("stale example")
        '''
        """)
    with pytest.raises(ExampleFailed, match="page.md:2.*stale example") as info:
        run_page(path, tmp_path / "site")
    assert info.value.__cause__.__traceback__.tb_next.tb_lineno == 3  # the page's own line


def test_a_bad_taskrunner_setting_fails(tmp_path):
    path = page(tmp_path, """\
        '''python
        # settings.py
        TASKRUNNER = {"MAX_WORKER": 4}
        '''
        """)
    with pytest.raises(ExampleFailed, match="MAX_WORKER"):
        run_page(path, tmp_path / "site")


def test_a_hook_path_that_does_not_import_fails_the_system_checks(tmp_path):
    path = page(tmp_path, """\
        '''python
        # settings.py
        TASKRUNNER = {"LONG_QUEUE_HOOK": "shop.alerts.missing"}
        '''
        """)
    with pytest.raises(ExampleFailed, match="system checks failed"):
        run_page(path, tmp_path / "site")


def test_a_failing_test_file_fails(tmp_path):
    path = page(tmp_path, """\
        '''python
        # shop/tests.py
        from django.test import SimpleTestCase

        class T(SimpleTestCase):
            def test_it(self):
                self.assertEqual(1, 2)
        '''
        """)
    with pytest.raises(ExampleFailed, match="ran 1 tests"):
        run_page(path, tmp_path / "site")


def test_cheap_manage_py_lines_run_and_long_running_ones_do_not(tmp_path):
    path = page(tmp_path, """\
        '''bash
        python manage.py runtasks                  # would never return: shown only
        python manage.py taskrunner_stats --no-such-option
        '''
        """)
    with pytest.raises(ExampleFailed, match="taskrunner_stats --no-such-option"):
        run_page(path, tmp_path / "site")


def test_comparison_and_other_blocks_are_not_run(tmp_path):
    run_page(page(tmp_path, """\
        '''python
        # celery (for comparison)
        raise RuntimeError("never run")
        '''
        '''ini
        [Service]
        '''
        """), tmp_path / "site")


def test_the_sample_page_of_the_contributing_guide_runs(tmp_path):
    guide = ROOT / "docs" / "contributing.md"
    [sample] = [b for b in parse_blocks(guide.read_text(), guide) if b.lang == "markdown"]
    assert [b.kind for b in parse_blocks(sample.text, guide)] == ["file", "code", "doctest"]
    run_page(page(tmp_path, sample.text), tmp_path / "site")
