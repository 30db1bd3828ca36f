"""Token texts for the viewer's token view: `vocab(tokenizer, ids)` -> ({id: text}, note).

A tokenizer given by name or path is read from local files only: its `tokenizer.json` with the
`tokenizers` library when there is one (a folder holding it, the file itself, or a Hugging Face hub
name already in the local cache: fast, no `transformers` import), else `transformers.AutoTokenizer`
(slow to import, ~10 s). A tokenizer object is used as it is (its `decode`). Never raises: a
tokenizer that cannot be loaded or decode gives an empty map and a one-line note saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tokenizer_json(name: str | Path) -> Path | None:
    """The local `tokenizer.json` for `name` (a folder, the file, or a cached hub name), or None."""
    path = Path(name)
    if path.is_dir():
        found = path / "tokenizer.json"
        return found if found.is_file() else None
    if path.is_file():
        return path if path.suffix == ".json" else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(name), "tokenizer.json")
    except Exception:  # noqa: BLE001 - not a hub name, or no hub library: no fast path
        return None
    return Path(cached) if isinstance(cached, str) else None


def _fast(path: Path, ids: list[int]) -> dict[str, str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    texts = tok.decode_batch([[i] for i in ids], skip_special_tokens=False)
    return {str(i): t for i, t in zip(ids, texts, strict=True)}


def vocab(tokenizer: Any, ids: set[int]) -> tuple[dict[str, str], str]:
    """{id: its text} for `ids` ("" note), or ({}, why not)."""
    ordered = sorted(ids)
    if isinstance(tokenizer, str | Path):
        found = tokenizer_json(tokenizer)
        if found is not None:
            try:
                return _fast(found, ordered), ""
            except Exception:  # noqa: BLE001 - e.g. an old tokenizer.json: try transformers
                pass
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - the page still shows the ids
            return (
                {},
                f"token view shows ids only: tokenizer {tokenizer} not loadable offline ({type(exc).__name__})",
            )
    try:
        return {str(i): tokenizer.decode([i]) for i in ordered}, ""
    except Exception as exc:  # noqa: BLE001
        return {}, f"token view shows ids only: decoding failed ({type(exc).__name__}: {exc})"
