"""The `rlvr` command dispatches to the sandbox report and the demo."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_help_shows_every_command_with_its_defaults(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert (
        "rlvr demo [--env code|code-repair|math|judge|qa] [--groups 8]" in out
        and "rlvr sandbox sweep" in out
        and "rlvr view PATH" in out
    )
    assert main(["sandbox", "--help"]) == 0
    assert "check" in capsys.readouterr().out
    assert main(["sandbox"]) == 2 and "build-image" in capsys.readouterr().err


def test_demo_help_shows_defaults_and_what_to_expect(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "code-repair" in out and "(default: code)" in out and "(default: 8)" in out
    assert "no_answer" in out and "--base-url URL --model NAME" in out


def test_demo_keeps_its_model_in_the_user_cache_never_in_the_package(monkeypatch, tmp_path):
    from environments.atropos_runtime import demo

    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "c"))
    assert demo.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("RLVR_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert demo.cache_dir() == tmp_path / "home" / ".cache" / "rlvr-envs"
    assert demo.HERE not in demo.cache_dir().parents


def test_every_sandbox_subcommand_reaches_the_sandbox_cli(capsys):
    assert main(["sandbox", "build-image", "--dockerfile"]) == 0
    assert "FROM" in capsys.readouterr().out


def test_each_demo_configuration_writes_to_its_own_folder():
    from environments.atropos_runtime.demo import parse_args, process_command, run_dir

    default = run_dir(parse_args([]))
    more_groups = run_dir(parse_args(["--groups", "32"]))  # more groups extend the same run
    others = [run_dir(parse_args(a)) for a in (["--group-size", "2"], ["--max-tokens", "16", "--group-size", "2"],
                                                ["--env", "qa"], ["--base-url", "http://127.0.0.1:9/v1", "--model", "org/m"])]  # fmt: skip
    assert default == more_groups == Path("out/demo/code")
    assert len({default, *others}) == 5 and others[1].name == "code-k2-t16"
    command = process_command(parse_args(["--group-size", "2"]), "http://x/v1", "m", "vllm")
    assert command[command.index("--env.data_path_to_save_groups") + 1] == "out/demo/code-k2/groups.jsonl"


def test_the_judge_demo_asks_for_a_judge_up_front(capsys):
    assert main(["demo", "--env", "judge"]) == 2
    err = capsys.readouterr().err
    assert "needs a judge model" in err and "--judge-url URL --judge-model NAME" in err
