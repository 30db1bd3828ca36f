"""The public benchmark cases (benchmarks/data/math_cases.jsonl) as a regression gate."""

from __future__ import annotations

from collections import defaultdict

from benchmarks.math_bench import SUBSETS  # one definition of the source subsets
from rubrics.math import check_answer


def test_public_accuracy_targets(public_cases):
    scored = [c for c in public_cases if not c["ambiguous"]]
    results = {c["id"]: check_answer(c["pred"], c["gold"]) for c in scored}
    correct = [c for c in scored if results[c["id"]] == c["expected"]]
    false_pos = [c["id"] for c in scored if results[c["id"]] and not c["expected"]]
    assert len(correct) / len(scored) >= 0.986  # issue 15: no regression below 98.6%
    assert false_pos == []
    by_subset = defaultdict(list)
    for c in scored:
        for name, member in SUBSETS.items():
            if member(c["source"]):
                by_subset[name].append(results[c["id"]] == c["expected"])
    for name, hits in by_subset.items():
        assert sum(hits) / len(hits) >= 0.95, name


def test_math_verify_issue_regressions(public_cases):
    """Every Math-Verify issue case is a permanent regression test."""
    issues = [c for c in public_cases if "issue" in c["source"] and not c["ambiguous"]]
    assert len(issues) >= 15
    wrong = [c["id"] for c in issues if check_answer(c["pred"], c["gold"]) != c["expected"]]
    assert wrong == []
