"""Fixtures: real bubblewrap sandboxes (one-shot and warm pool), shared per module to keep runtime low."""

from __future__ import annotations

import shutil

import pytest

from sandbox.bwrap import BwrapConfig, BwrapSandbox


@pytest.fixture(scope="module", params=["oneshot", "pool"])
def sb(request):
    """A bwrap sandbox; 'pool' routes python jobs through warm fork-server workers."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (scripts/ci_host_setup.sh installs it)")
    box = BwrapSandbox(BwrapConfig(slots=2, warm_pool=request.param == "pool"))
    yield box
    box.close_sync()
