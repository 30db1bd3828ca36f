"""The product's docs stand alone: no file users get points into the developers' `shared/` folder, and
every `docs/<page>.md` that code or docs name exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("environments", "rubrics", "sandbox", "scripts", "docs", "benchmarks", "examples", "docker")
TOP = ("README.md", "CHANGELOG.md", "Makefile", "pyproject.toml")


def product_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *PRODUCT, *TOP],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    files = [
        ROOT / f for f in listed if not f.startswith("benchmarks/archive/")
    ]  # dated records, kept as they were
    return [f for f in files if f.is_file() and f.suffix in (".py", ".md", ".sh", ".toml", ".txt", "")]


def test_no_product_file_points_into_shared():
    files = product_files()
    assert len(files) > 50  # the listing found the tree
    hits = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
        if re.search(r"\bshared/(briefs|DESIGN|benchmarks|hooks)", line)
    ]
    assert hits == [], "product text points into shared/ (users do not have it): " + ", ".join(hits)


def test_every_named_docs_page_exists():
    named = {
        m for f in product_files() for m in re.findall(r"\bdocs/([\w.-]+\.md)", f.read_text(errors="replace"))
    }
    assert "atropos.md" in named
    assert sorted(p for p in named if not (ROOT / "docs" / p).is_file()) == []
