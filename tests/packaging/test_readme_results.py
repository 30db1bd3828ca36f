"""The README's learning results are read from the committed results tables: every decimal number a
results paragraph quotes appears in the table it links to (a rerun that changes the table and not
the README fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# README section heading -> the committed table its numbers come from
SECTIONS = {
    "## Does it teach? The RLEF result through the real stack": "benchmarks/results/rlef_learning.md",
    "### A real language model learns: `make learn-lm`": "benchmarks/results/lm_learning.md",
}


def section(text: str, heading: str) -> str:
    """The prose of one README section: from its heading to the next heading, code blocks removed."""
    body = text.split(heading + "\n", 1)[1]
    body = re.split(r"\n#{1,3} ", body, maxsplit=1)[0]
    return re.sub(r"```.*?```", "", body, flags=re.S)


@pytest.mark.parametrize("heading", list(SECTIONS))
def test_readme_quotes_only_numbers_from_its_results_table(heading):
    readme = (ROOT / "README.md").read_text()
    assert heading in readme
    table = (ROOT / SECTIONS[heading]).read_text()
    quoted = re.findall(r"(?<![\w.])\d+\.\d+", section(readme, heading))
    assert len(quoted) >= 3, quoted  # the paragraph states results
    missing = [n for n in quoted if not re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", table)]
    assert missing == [], f"README numbers not in {SECTIONS[heading]}: {missing}"


def test_section_reader_stops_at_the_next_heading():
    text = "## A\nsays 0.5\n```\n0.9\n```\n### B\n0.7\n"
    assert re.findall(r"\d+\.\d+", section(text, "## A")) == ["0.5"]


def test_a_rounded_number_is_not_found_inside_a_longer_one():
    assert not re.search(r"(?<![\d.])0\.87(?!\d)", "0.875 [0.81, 0.92]")
    assert re.search(r"(?<![\d.])0\.155(?!\d)", "+0.065 [-0.025, +0.155]")
