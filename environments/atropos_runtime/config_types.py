"""Config field types that survive atroposlib's command line.

atroposlib rebuilds every env config field for its CLI from the bare annotation (validators and
`Annotated` metadata are dropped), and its argparse layer hands a dict-typed option over as the
string the user typed. A field annotated `JsonObject` accepts that string as JSON, a `NameList` a
JSON array or comma-separated names; real mappings and lists (from `--config` YAML or Python) pass
as they are.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema


def _object_from_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON object: {e}") from None
        if not isinstance(value, dict):
            raise ValueError(f"a JSON object is needed, got {type(value).__name__}")
    return value


class JsonObject(dict):
    """A `dict[str, Any]` that may be given as a JSON object string (`--env.x '{"a": 1}'`)."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            _object_from_json, handler.generate_schema(dict[str, dict[str, Any]])
        )


def _names_from_text(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"not a JSON array: {e}") from None
        return [name.strip() for name in text.split(",") if name.strip()]
    return value


class NameList(list):
    """A `list[str]` that may be given as `a,b,c` or a JSON array string (`--env.x gcd,lcm`)."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            _names_from_text, handler.generate_schema(list[str])
        )
