"""InferenceWatcher and `within` on a real atroposlib server object pointed at a closed loopback port."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.atropos_runtime.local_model import free_port
from environments.atropos_runtime.server_health import InferenceWatcher, describe, within


def dead_server() -> OpenAIServer:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    return OpenAIServer(APIServerConfig(base_url=url, model_name="m", api_key="x", server_type="openai"))


async def test_a_dead_server_is_one_line_and_its_downtime_does_not_count(caplog):
    caplog.set_level(logging.WARNING, "rlvr")
    server = dead_server()
    watcher = InferenceWatcher([server], interval_s=0.1, probe_timeout_s=1.0, status_every_s=60)
    await watcher.start()
    try:
        await watcher.next_round()
        assert watcher.down == [server.config.base_url] and server.server_healthy is False
        assert server.initialized and server.check_task is not None  # atroposlib starts no probe of its own
        # 1.5 s of work while the server is down does not use up a 0.5 s inference deadline
        assert await within(asyncio.sleep(1.5, result="done"), 0.5, watcher) == "done"
        with pytest.raises(asyncio.TimeoutError):
            await within(asyncio.sleep(1.5), 0.5, None)
    finally:
        await watcher.aclose()
    down_lines = [r.message for r in caplog.records if "is down" in r.message]
    assert len(down_lines) == 1 and server.config.base_url in down_lines[0]
    assert watcher.outages == 1


async def test_stop_policy_sets_the_reason_naming_the_url():
    server = dead_server()
    watcher = InferenceWatcher([server], policy="stop", interval_s=0.1, probe_timeout_s=1.0)
    await watcher.start()
    try:
        await asyncio.wait_for(watcher.stopped.wait(), 10)
    finally:
        await watcher.aclose()
    assert watcher.stop_reason and server.config.base_url in watcher.stop_reason


def test_describe_finds_a_reason_along_the_cause_chain_or_names_the_type():
    def chained(outer: BaseException, inner: BaseException) -> BaseException:
        try:
            try:
                raise inner
            except BaseException as exc:
                raise outer from exc
        except BaseException as exc:
            return exc

    # a kept-alive connection whose server was restarted: empty messages all the way down
    assert describe(chained(httpx.ReadError(""), httpx.ReadError(""))) == "ReadError"
    assert describe(chained(httpx.ReadError(""), OSError("\n  \n"))) == "ReadError"
    assert describe(chained(httpx.ConnectError(""), OSError("refused\nmore"))) == "ConnectError: refused"
    assert describe(httpx.ReadError("\n  reset by peer\n")) == "ReadError: reset by peer"
    try:
        try:
            raise ValueError("the context")
        except ValueError:
            raise KeyError() from None  # noqa: B904 - the context is kept, the cause is not
    except KeyError as exc:
        assert describe(exc) == "KeyError: the context"


def test_a_timeout_is_described_in_words():
    """A hung server (accepts, never answers) is said to be one, not shown as a bare TimeoutError."""
    assert describe(httpx.ReadTimeout("")) == (
        "ReadTimeout: connected, but no answer within the timeout (a hung or overloaded server)"
    )
    assert describe(httpx.ConnectTimeout("")).startswith("ConnectTimeout: no connection within the timeout")
