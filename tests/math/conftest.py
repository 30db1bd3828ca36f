"""Shared fixtures: one warm CAS pool for the whole math test session."""

from __future__ import annotations

import json
import pathlib

import pytest

from rubrics.math import CasPool, default_pool

CASES = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "math_cases.jsonl"


@pytest.fixture(scope="session", autouse=True)
def warm_default_pool():
    """Start the process-wide pool once (its start-up is not part of any check)."""
    pool = default_pool()
    assert pool.run(("probe", "echo", 1), 30.0).value == 1
    yield pool


@pytest.fixture
def pool():
    with CasPool(workers=1) as p:
        yield p


@pytest.fixture(scope="session")
def public_cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
