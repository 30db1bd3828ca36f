"""Golds as trainers hand them over: dataset columns flatten structured golds to JSON strings (HF
datasets, veRL parquet) and veRL passes numpy arrays for list cells.

`decode_gold` turns a JSON *object* string (e.g. a code test suite `{"tests": [...]}`) back into a
dict and a numpy array into a list; every other value is returned as it is. Only objects are decoded:
a math gold such as "[1, 2]" (an interval) or "1e3" must stay the string the dataset holds.
"""

from __future__ import annotations

import json
from typing import Any


def decode_gold(answer: Any) -> Any:
    if isinstance(answer, str):
        text = answer.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                decoded = json.loads(text)
            except json.JSONDecodeError:
                return answer
            return decoded if isinstance(decoded, dict) else answer
        return answer
    tolist = getattr(answer, "tolist", None)  # numpy arrays / scalars from veRL's non_tensor_batch
    if callable(tolist) and type(answer).__module__ == "numpy":
        return [decode_gold(a) for a in tolist()] if getattr(answer, "ndim", 0) else tolist()
    return answer
