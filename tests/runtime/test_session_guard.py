"""The suite's own guard (tests/conftest.py): a test that leaves an aiohttp session it made open fails
at its teardown, naming the cause, instead of aiohttp warning at exit far from it."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]


def test_a_test_that_leaves_its_aiohttp_session_open_fails_and_one_that_closes_it_passes(
    pytester, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(
        "import aiohttp, pytest\n"
        "from tests.conftest import pytest_runtest_call, pytest_runtest_teardown  # noqa: F401\n\n"
        "@pytest.fixture\n"
        "async def session():\n"
        "    async with aiohttp.ClientSession() as s:\n"
        "        yield s\n"
    )
    pytester.makepyfile(
        """
        import aiohttp

        async def test_leaves_it_open():
            aiohttp.ClientSession()

        async def test_closes_it():
            async with aiohttp.ClientSession():
                pass

        async def test_a_fixture_closes_it(session):
            assert not session.closed
        """
    )
    result = pytester.runpytest_subprocess(
        "-o",
        "asyncio_mode=auto",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["ERROR *::test_leaves_it_open*"])
    result.stdout.fnmatch_lines(["*1 aiohttp session(s) made by this test left open*"])
