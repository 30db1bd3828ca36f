"""A node's probe job on real sandboxes and CAS pools, without a cluster: `RubricHost.probe()` passes
on a working node and names the failure on one that cannot score (no bubblewrap, a broken Docker)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")  # the rubrics.remote package imports it

from rubrics.remote.node import CodeNodeRubric, MathNodeRubric, RubricHost, fingerprint  # noqa: E402


async def probe(factory) -> str | None:
    host = RubricHost(factory, 1, fingerprint(), "127.0.0.7", probe_timeout_s=60)
    try:
        return await host.probe()
    finally:
        await host.close()


@pytest.mark.parametrize("factory", [CodeNodeRubric("bwrap"), MathNodeRubric()], ids=["bwrap", "cas"])
async def test_a_working_node_passes(factory):
    assert await probe(factory) is None


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        (
            CodeNodeRubric("bwrap", {"sandbox_options": {"bwrap": "/nonexistent/bwrap"}}),
            "bubblewrap not found",
        ),
        (
            CodeNodeRubric("docker", {"sandbox_options": {"base_url": "unix:///nonexistent/docker.sock"}}),
            "SandboxUnavailable",
        ),
    ],
    ids=["no-bwrap", "broken-docker"],
)
async def test_a_node_that_cannot_score_names_why(factory, why):
    line = await probe(factory)
    assert line is not None and line.startswith("node 127.0.0.7 failed its probe job: error: sandbox failed")
    assert why in line and "\n" not in line


async def test_a_refused_node_fails_its_probe_with_the_refusal():
    host = RubricHost(MathNodeRubric(), 1, {**fingerprint(), "python": "2.7"}, "127.0.0.7")
    assert "refuses to score" in await host.probe()
