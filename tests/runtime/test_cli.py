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
        "rlvr demo [--env math|code|code-repair|judge|qa] [--groups 16]" in out
        and "rlvr model fetch | path | verify" in out
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
    assert "code-repair" in out and "(default: math)" in out and "(default: 16)" in out
    assert (
        "SmolLM2-135M-Instruct" in out and "(default: real)" in out and "--base-url URL --model NAME" in out
    )


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
    tiny = run_dir(parse_args(["--local-model", "tiny"]))
    assert default == more_groups == Path("out/demo/math") and tiny == Path("out/demo/math-tiny")
    assert len({default, tiny, *others}) == 6 and others[1].name == "math-k2-t16"
    command = process_command(parse_args(["--group-size", "2"]), "http://x/v1", "m", "vllm")
    assert command[command.index("--env.data_path_to_save_groups") + 1] == "out/demo/math-k2/groups.jsonl"


def test_the_real_model_runs_each_env_with_its_preset_and_others_without():
    from environments.atropos_runtime.demo import REAL, parse_args, process_command

    def flag(command: list[str], name: str) -> str | None:
        return command[command.index(name) + 1] if name in command else None

    real = process_command(parse_args([]), "http://x/v1", "m", "vllm")
    assert flag(real, "--env.rg_tasks") == "basic_arithmetic" and flag(real, "--env.max_tokens") == "96"
    assert "\\boxed{7}" in flag(real, "--env.system_prompt")
    mine = process_command(
        parse_args(["--max-tokens", "40", "--", "--env.temperature", "1.0"]), "u", "m", "vllm"
    )
    assert flag(mine, "--env.max_tokens") == "40" and mine[-2:] == [
        "--env.temperature",
        "1.0",
    ]  # the user's last
    for args in (["--local-model", "tiny"], ["--base-url", "http://127.0.0.1:9/v1", "--model", "org/m"]):
        other = process_command(parse_args(args), "http://x/v1", "m", "vllm")
        assert "--env.rg_tasks" not in other and "--env.system_prompt" not in other
    assert set(REAL) == {"math", "math-python", "code", "code-repair", "qa", "judge"}
    # a local model (real or tiny: plain ChatML) needs the tool template; another server's model has its own
    for args, template in (([], "chatml-tools"), (["--local-model", "tiny"], "chatml-tools"),
                           (["--base-url", "http://127.0.0.1:9/v1", "--model", "org/m"], None)):  # fmt: skip
        tools = process_command(parse_args(["--env", "math-python", *args]), "http://x/v1", "m", "vllm")
        assert flag(tools, "--env.chat_template") == template
    assert (
        flag(process_command(parse_args(["--env", "math-python"]), "u", "m", "vllm"), "--env.tool_examples")
        == "3"
    )
    judge = process_command(parse_args(["--env", "judge"]), "http://x/v1", "m", "vllm")
    assert flag(judge, "--env.judge_base_url") == "http://x/v1" and flag(judge, "--env.judge_model") == "m"


def test_the_demo_reports_the_accuracy_from_what_process_wrote(tmp_path):
    from environments.atropos_runtime.demo import accuracy_line

    (tmp_path / "groups.jsonl").write_text('{"scores": [1.0, 0.0]}\n{"scores": [1.0, 1.0]}\n')
    (tmp_path / "groups.summary.json").write_text(
        '{"mean_score": 0.75, "reward_status": {"ok": 3, "no_answer": 1, "timeout": 2}}'
    )
    line = accuracy_line(tmp_path)
    assert "mean reward 0.75" in line and "3/4 samples" in line and "2 could not be verified" in line
    assert accuracy_line(tmp_path / "missing").startswith("no result to report")


def test_the_tiny_judge_demo_asks_for_a_judge_up_front(capsys):
    assert main(["demo", "--env", "judge", "--local-model", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "needs a judge model" in err and "--judge-url URL --judge-model NAME" in err
