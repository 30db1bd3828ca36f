"""JSON on the runtime's hot paths through orjson, with the standard library's meaning kept.

The token path parses every completions response (ids and logprobs of every sampled token), process
writes every group as a JSON line and serve posts every group to run-api. With inference answered at
once (`benchmarks/env_overhead_bench.py`), the standard library's `json` was ~30% of the env
process's CPU; orjson does the same work several times faster.

Contract (what differs in orjson is routed to `json`, so callers see `json`'s results):
* `loads(data)`: the parsed value. orjson refuses `NaN`/`Infinity` (which Python's `json` writes
  and reads): such text, and any text orjson refuses, is parsed by `json.loads`, whose error
  (`json.JSONDecodeError`, a `ValueError`) is raised for text that is not JSON. One difference is
  kept: an integer beyond 64 bits is read as a float (finding one first would cost ten times the
  parse); it is for the answers of vLLM and run-api, whose ids and counts are far below that.
* `dumps(value)`: UTF-8 bytes of compact JSON whose parse equals `json.loads(json.dumps(value))`.
  orjson would write non-finite floats as `null`; a value holding one (or an int beyond 64 bits, a
  non-string key, a lone surrogate, a type orjson does not know) is encoded by `json.dumps`, with
  `NaN`/`Infinity` as Python writes them; a type neither knows raises `TypeError`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)


def dumps(value: Any) -> bytes:
    if _all_finite(value):
        try:
            return orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError: see the module docstring
            pass
    return json.dumps(value, separators=(",", ":")).encode()


def _all_finite(value: Any) -> bool:
    """No float in `value` is NaN or infinite. A list whose first item is a number is summed in C
    (a NaN or an infinity makes the sum non-finite); only lists of containers are walked in Python."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values() if type(v) is not str)
    if isinstance(value, list | tuple):
        if not value:
            return True
        if isinstance(value[0], int | float):
            try:
                return math.isfinite(sum(value))
            except (TypeError, OverflowError):  # mixed items: walk them (a huge int overflows float)
                pass
        return all(_all_finite(v) for v in value if type(v) is not str)
    return True  # str, int, bool, None, or a type orjson refuses (then json decides, see dumps)
