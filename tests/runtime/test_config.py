"""atroposlib traps fixed centrally: list configs, wandb off, wandb_name set, dummy key, fail-fast errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.atropos_runtime.servers import VLLMTokenServer
from environments.qa_env import QAEnv, QAEnvConfig, QATask


def test_config_init_returns_a_list_with_offline_friendly_defaults():
    env_config, servers = QAEnv.config_init()
    assert isinstance(servers, list) and len(servers) == 1
    assert env_config.use_wandb is False and env_config.wandb_name == "qa"
    assert servers[0].api_key and servers[0].server_type == "vllm"


def test_constructor_honours_a_bare_config_and_never_forces_wandb(tiny_model, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["qa_env.py", "process"])
    config = QAEnvConfig(tokenizer_name=str(tiny_model), use_wandb=True, wandb_name=None)
    server = APIServerConfig(
        base_url="http://127.0.0.1:1/v1",
        model_name="m",
        api_key="",
        tokenizer_name="none",
        server_type="vllm",
    )
    env = QAEnv(config, server)
    assert [s.config.base_url for s in env.server.servers] == ["http://127.0.0.1:1/v1"]
    assert isinstance(env.server.servers[0], VLLMTokenServer)
    assert env.config.use_wandb is False and env.config.wandb_name == "qa"
    assert env.server.servers[0].config.api_key == "x"


def test_bad_group_size_is_a_clear_error(tiny_model):
    with pytest.raises(ValueError, match="group_size"):
        QAEnv(
            QAEnvConfig(tokenizer_name=str(tiny_model), group_size=0),
            [APIServerConfig(base_url="http://x/v1")],
        )


def test_malformed_rows_are_skipped_with_one_line_each(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"question": "q1", "answer": "a"}\n{"question": "q2"}\n{"answer": "b", "question": ""}\n'
    )
    items, errors = QATask(QAEnvConfig(dataset=str(data), eval_fraction=0)).items("train")
    assert [i.answer for i in items] == ["a"]
    assert len(errors) == 2 and "missing field 'answer'" in errors[0] and "'question' is empty" in errors[1]


def test_unreadable_dataset_is_one_clear_error(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "q1", "answer": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2: invalid JSON"):
        QATask(QAEnvConfig(dataset=str(data))).items("train")


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("rows.json", b"this is not json", "not valid JSON"),
        ("rows.json", b'[{"question": "q", "answer": "a"},', "not valid JSON"),
        ("rows.jsonl", b'{"question": "q", "answer": "\xff\xfe"}\n', "not UTF-8"),
        ("rows.json", b"\xff\xfe[]", "not UTF-8"),
        ("rows.parquet", b"PAR1 but not really", "cannot read dataset"),
        ("rows.json", b'{"question": "q"}', "must hold a list"),
    ],
)
def test_a_dataset_file_that_cannot_be_parsed_is_an_error_naming_the_file(tmp_path, name, content, says):
    from environments.atropos_runtime.base import _one_line
    from environments.data_sources import DataSourceError

    data = tmp_path / name
    data.write_bytes(content)
    with pytest.raises(DataSourceError) as info:
        QATask(QAEnvConfig(dataset=str(data))).items("train")
    line = _one_line(info.value)
    assert str(data) in line and says in line and "\n" not in line


def test_a_directory_given_as_dataset_is_an_error_naming_it(tmp_path):
    from environments.data_sources import DataSourceError

    (tmp_path / "rows.json").mkdir()
    with pytest.raises(DataSourceError, match="is not a file"):
        QATask(QAEnvConfig(dataset=str(tmp_path / "rows.json"))).items("train")


@pytest.mark.parametrize("verbose", [False, True])
def test_atroposlib_status_lines_only_with_verbose(tiny_model, verbose):
    import logging

    config = QAEnvConfig(tokenizer_name=str(tiny_model), verbose=verbose)
    QAEnv(config, [APIServerConfig(base_url="http://127.0.0.1:1/v1", model_name="m", server_type="vllm")])
    status_line = logging.getLogger("atroposlib.envs.base").isEnabledFor(logging.INFO)
    assert status_line is verbose


def test_a_yaml_config_file_is_read(tiny_model, tmp_path):
    """`--config file.yaml` (yaml loads on first use, see _atropos_lazy): its values reach the run,
    here an inference server URL nothing listens on, which the start-up check names."""
    root = Path(__file__).resolve().parents[2]
    config = tmp_path / "run.yaml"
    config.write_text(
        f"env:\n  tokenizer_name: {tiny_model}\n  total_steps: 1\n  data_path_to_save_groups: {tmp_path / 'g.jsonl'}\n"
        "openai:\n  base_url: http://127.0.0.1:1/v1\n  model_name: m\n"
    )
    proc = subprocess.run(
        [sys.executable, str(root / "environments" / "qa_env.py"), "process", "--config", str(config)],
        capture_output=True, text=True, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "cannot reach the inference server at http://127.0.0.1:1/v1" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("argv", "flag", "given"),
    [
        (["process", "--env.verbose", "true"], True, True),
        (["process", "--env.verbose=false"], False, True),
        (["process", "--env.verbose_extra", "true"], False, False),  # another option's prefix
        (["process", "--env.verbose", "false", "--env.verbose=true"], True, True),  # the last one counts
        (["process"], False, False),
    ],
)
def test_command_line_options_are_read_by_exact_name(monkeypatch, argv, flag, given):
    from environments.atropos_runtime import options_given

    monkeypatch.setattr(sys, "argv", ["env.py", *argv])
    assert (options_given.option_flag("verbose"), options_given.option_given("verbose")) == (flag, given)


@pytest.mark.parametrize(
    ("argv", "yaml_text", "flag", "given"),
    [
        (["process"], "env:\n  verbose: true\n", True, True),
        (["process"], "env:\n  verbose: false\n", False, True),
        (["process", "--env.verbose", "false"], "env:\n  verbose: true\n", False, True),  # CLI wins
        (["process"], "env:\n  total_steps: 3\n", False, False),
        (["process"], "openai:\n  model_name: m\n", False, False),  # no env section
        (["process"], "- not a mapping\n", False, False),
        (["process"], "env: [unclosed\n", False, False),  # not YAML: atroposlib says why
    ],
)
def test_options_set_in_the_yaml_config_count_as_given(monkeypatch, tmp_path, argv, yaml_text, flag, given):
    """`--config file.yaml` sets options as the command line does (atroposlib: CLI > YAML > defaults):
    use_wandb, verbose, tokenizer_name and max_token_length set there are honoured."""
    from environments.atropos_runtime import options_given

    config = tmp_path / "run.yaml"
    config.write_text(yaml_text)
    for form in (["--config", str(config)], [f"--config={config}"]):
        monkeypatch.setattr(sys, "argv", ["env.py", *argv, *form])
        assert (options_given.option_flag("verbose"), options_given.option_given("verbose")) == (flag, given)
    monkeypatch.setattr(sys, "argv", ["env.py", "process", "--config", str(tmp_path / "missing.yaml")])
    assert not options_given.option_given("verbose")


def test_the_yaml_config_is_parsed_once_per_version_of_the_file(monkeypatch, tmp_path):
    """Start-up asks for several options; the file is read once, and again only once it changes."""
    import yaml

    from environments.atropos_runtime import options_given

    calls = []
    real = yaml.safe_load
    monkeypatch.setattr(yaml, "safe_load", lambda f: calls.append(1) or real(f))
    config = tmp_path / "run.yaml"
    config.write_text("env:\n  verbose: true\n")
    monkeypatch.setattr(sys, "argv", ["env.py", "process", "--config", str(config)])
    options_given._env_section.cache_clear()
    assert [options_given.option_flag("verbose") for _ in range(4)] == [True] * 4
    assert options_given.option_value("total_steps") is None
    assert len(calls) == 1
    config.write_text("env:\n  verbose: false\n  total_steps: 30\n")  # another size: a new version
    assert (options_given.option_flag("verbose"), options_given.option_value("total_steps")) == (False, "30")
    assert len(calls) == 2
