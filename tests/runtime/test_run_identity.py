"""A process output resumes only the run that wrote it (environments/atropos_runtime/run_identity.py)."""

from __future__ import annotations

import json

import pytest

from environments.atropos_runtime.run_identity import check_output_path, claim_output

RUN = {"env": "qa", "model": "m", "group_size": 3, "temperature": 1.0}


def test_the_same_run_resumes_and_another_is_refused_naming_what_differs(tmp_path):
    out = tmp_path / "g.jsonl"
    claim_output(out, RUN, overwrite=False)
    out.write_text('{"uid": "a#0"}\n')
    claim_output(out, RUN, overwrite=False)  # the same run: resumes
    with pytest.raises(SystemExit) as refused:
        claim_output(out, {**RUN, "temperature": 0.7, "group_size": 2}, overwrite=False)
    assert str(refused.value).startswith(
        f"{out} holds another run (group_size: 3 there, 2 now; temperature: 1.0 there"
    )
    assert "--env.overwrite true" in str(refused.value) and out.read_text() == '{"uid": "a#0"}\n'
    out.with_suffix(".dropped.jsonl").write_text('{"uid": "b#0", "reason": "error", "samples": []}\n')
    claim_output(out, {**RUN, "group_size": 2}, overwrite=True)  # replaced: old groups and drops gone
    assert (
        not out.exists()
        and not out.with_suffix(".dropped.jsonl").exists()
        and json.loads(out.with_suffix(".run.json").read_text())["group_size"] == 2
    )


def test_groups_of_an_unknown_run_are_not_appended_to(tmp_path):
    out = tmp_path / "g.jsonl"
    out.write_text('{"uid": "a#0"}\n')  # written before run settings were stored
    with pytest.raises(SystemExit, match="settings are unknown"):
        claim_output(out, RUN, overwrite=False)


def test_a_path_that_cannot_hold_the_output_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit, match=r"cannot write .*/file/g.jsonl: .*/file is a file, not a folder"):
        check_output_path(tmp_path / "file" / "g.jsonl")
    with pytest.raises(SystemExit, match="is a folder; give a file path"):
        check_output_path(tmp_path)
