"""The `rlvr` command dispatches to the sandbox report and the demo."""

from __future__ import annotations

from environments.atropos_runtime.cli import main


def test_sandbox_check_reports_every_backend(capsys):
    code = main(["sandbox", "check"])
    out = capsys.readouterr().out
    assert "bwrap" in out and "docker" in out
    assert code == (0 if "ok:" in out else 1)


def test_unknown_command_prints_usage(capsys):
    assert main(["frobnicate"]) == 2
    assert "rlvr sandbox check" in capsys.readouterr().err


def test_demo_help_lists_the_environments(capsys):
    try:
        main(["demo", "--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "--env" in out and "code" in out and "--base-url" in out
