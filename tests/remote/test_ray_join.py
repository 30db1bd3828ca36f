"""Joining a cluster fails fast and in one line when the address is wrong: nothing listens there, a
port that never answers, a server that is not Ray. Real sockets on loopback (127.0.0.9), no Ray
cluster; the deadline is the scorer's own `connect_timeout_s`."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from rubrics.core import Sample  # noqa: E402
from rubrics.remote import RayRubric, RayScorerConfig, RemoteScorerError, build_scorer, connect  # noqa: E402
from rubrics.remote.node import MathNodeRubric  # noqa: E402

HOST = "127.0.0.9"
DEADLINE_S = 3.0


@pytest.fixture(autouse=True)
def not_connected():
    if ray.is_initialized():
        pytest.skip("this process is already connected to a cluster")
    yield
    assert not ray.is_initialized()  # a failed join never starts a local Ray instead


def listener(answer: bytes | None) -> tuple[socket.socket, int]:
    """A loopback TCP server that accepts and writes `answer` (None: accepts, says nothing)."""
    server = socket.create_server((HOST, 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def free_port() -> int:
    with socket.create_server((HOST, 0)) as s:
        return s.getsockname()[1]


async def joined(address: str) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(RemoteScorerError) as err:
        await connect(MathNodeRubric(), RayScorerConfig(address=address, connect_timeout_s=DEADLINE_S))
    return str(err.value), time.monotonic() - start


async def test_nothing_listening_is_refused_at_once():
    address = f"{HOST}:{free_port()}"
    line, took = await joined(address)
    assert took < DEADLINE_S and "\n" not in line
    assert line == f"Ray cluster at {address}: connection refused (nothing listens there)"


async def test_a_port_that_never_answers_fails_within_the_deadline():
    server, port = listener(None)
    with server:
        line, took = await joined(f"{HOST}:{port}")
    assert took < DEADLINE_S + 2 and "\n" not in line
    assert line.startswith(f"Ray cluster at {HOST}:{port}: the port is open but no Ray GCS answered")


async def test_a_server_that_is_not_ray_is_named():
    server, port = listener(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi")
    with server:
        line, took = await joined(f"{HOST}:{port}")
    assert took < DEADLINE_S + 2 and "\n" not in line
    assert line.startswith(
        f"Ray cluster at {HOST}:{port}: the port is open but what answered is not a Ray GCS"
    )


async def test_first_use_raises_and_the_scorer_stays_failed():
    address = f"{HOST}:{free_port()}"
    rubric = build_scorer(MathNodeRubric(), "ray", address=address)  # joins on first use
    assert isinstance(rubric, RayRubric)
    sample = Sample(prompt="", completion="\\boxed{4}", answer="4")
    with pytest.raises(RemoteScorerError, match="connection refused"):
        await rubric.score_group([sample])  # never a group of (None, "error") results
    start = time.monotonic()
    with pytest.raises(RemoteScorerError, match="connection refused"):
        await rubric.score(sample)
    assert time.monotonic() - start < 1.0  # the same error again, without joining again
    assert "connection refused" in rubric.describe()["failure"]
    await asyncio.wait_for(rubric.aclose(), 10)
