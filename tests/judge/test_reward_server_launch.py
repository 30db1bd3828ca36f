"""`rlvr-reward-server` without the `server` extra: one line naming the install, no traceback."""

from __future__ import annotations

import subprocess
import sys

from rubrics.server import launch


def test_missing_extra_is_one_line(monkeypatch, capsys):
    real = launch.importlib.util.find_spec
    monkeypatch.setattr(
        launch.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "prometheus_client" else real(name, *a),
    )
    assert launch.main(["--help"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "prometheus-client missing" in err[0] and "rlvr-envs[server]" in err[0]


def test_the_package_imports_without_the_server_stack():
    """Importing `rubrics.server.launch` must not pull in FastAPI (the check runs before it)."""
    code = "import sys; import rubrics.server.launch; assert 'fastapi' not in sys.modules, 'fastapi loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from rubrics.server import ServerConfig, create_app  # the lazy names still resolve

    assert callable(create_app) and ServerConfig.__name__ == "ServerConfig"


def test_help_runs_through_the_launcher(capsys):
    try:
        launch.main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    assert "rlvr-reward-server" in capsys.readouterr().out
