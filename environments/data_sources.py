"""Reading dataset rows from the places users keep them: local JSONL/JSON/Parquet files or the HF hub.

`load_rows("path/to/file.jsonl")` reads a local file; `load_rows("hf:owner/name", split=..., config=...)`
(or any name that is not an existing path) goes through `datasets.load_dataset`. Environments map
the rows' fields themselves. Splits: a local file serves both splits unless `eval_fraction` carves a
deterministic eval slice off the end.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


class DataSourceError(ValueError):
    """The dataset named in the config cannot be read (the message says which and why)."""


def read_local(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a local .parquet, .json (a list of objects) or JSON-lines file. Any unreadable file
    (bad JSON, wrong encoding, not parquet, a directory) is a `DataSourceError` naming the file."""
    p = Path(path)
    if not p.exists():
        raise DataSourceError(f"dataset file {p} does not exist")
    if not p.is_file():
        raise DataSourceError(f"dataset path {p} is not a file")
    try:
        return _read(p)
    except DataSourceError:
        raise
    except json.JSONDecodeError as exc:
        raise DataSourceError(
            f"{p}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except UnicodeDecodeError as exc:
        raise DataSourceError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except Exception as exc:  # noqa: BLE001 - parquet/OS errors: one clear line naming the file
        raise DataSourceError(f"{p}: cannot read dataset: {type(exc).__name__}: {exc}") from None


def _read(p: Path) -> list[dict[str, Any]]:
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    if suffix == ".json":
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise DataSourceError(f"{p}: a .json dataset must hold a list of objects")
        return data
    rows = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataSourceError(f"{p}:{lineno}: invalid JSON ({exc.msg})") from None
            rows.append(row if isinstance(row, Mapping) else {"_raw": row})
    return rows


def read_hub(name: str, split: str, config: str | None = None) -> list[dict[str, Any]]:
    """Rows of a Hugging Face hub dataset (network + `datasets` needed; not used by the defaults)."""
    try:
        from datasets import load_dataset
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise DataSourceError("hub datasets need `pip install datasets`") from exc
    try:
        return list(load_dataset(name.removeprefix("hf:"), config, split=split))
    except Exception as exc:  # noqa: BLE001 - surface any loader failure as one clear line
        raise DataSourceError(f"cannot load hub dataset {name!r} split {split!r}: {exc}") from exc


def load_rows(source: str, split: str = "train", config: str | None = None) -> list[dict[str, Any]]:
    """Local file if `source` is an existing path (or ends in .jsonl/.json/.parquet), else the hub."""
    if source.startswith("hf:"):
        return read_hub(source, split, config)
    if Path(source).exists() or source.endswith((".jsonl", ".json", ".parquet")):
        return read_local(source)
    return read_hub(source, split, config)


def split_rows(rows: list[dict[str, Any]], split: str, eval_fraction: float) -> list[dict[str, Any]]:
    """Deterministic split of one list: the last `eval_fraction` of rows is eval, the rest train."""
    if eval_fraction <= 0:
        return rows
    cut = len(rows) - max(1, int(round(len(rows) * eval_fraction)))
    return rows[cut:] if split == "eval" else rows[:cut]


def cached_rows(key: str, build: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """`build()`, memoised on disk under `key` (which must name everything the rows depend on, e.g.
    a generator's version and seed) in `$RLVR_CACHE_DIR` or `~/.cache/rlvr-envs`. A missing,
    unreadable or unwritable cache only costs the call to `build`."""
    root = os.environ.get("RLVR_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "rlvr-envs")
    path = Path(root) / "rows" / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == key and isinstance(stored.get("rows"), list):
            return stored["rows"]
    except (OSError, ValueError, AttributeError):
        pass
    rows = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "rows": rows}), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass
    return rows
