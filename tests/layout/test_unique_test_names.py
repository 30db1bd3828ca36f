"""Test modules have unique file names: the test folders are not packages, so pytest imports each
module by its basename, and two `test_x.py` in different folders stop collection of the whole suite
(a targeted run of one folder does not show it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_file_name():
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert len(names) > 50  # found the suite
    assert [n for n, count in names.items() if count > 1] == []
