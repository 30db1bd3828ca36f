"""The runtime's JSON (orjson on the hot paths) means exactly what the standard library's means:
every value that `json` encodes decodes to the same value, including what orjson alone would get
wrong (non-finite floats, ints beyond 64 bits, non-string keys, lone surrogates, float subclasses)."""

from __future__ import annotations

import json

import pytest

from environments.atropos_runtime import fast_json

NAN, INF = float("nan"), float("inf")


class Score(float):
    """A float subclass (as numpy's float64 is one)."""


VALUES = [
    {"tokens": [[1, 2, 3], []], "scores": [1.0, -1.0], "overrides": None, "ok": True},
    {"messages": [[{"role": "user", "content": 'ünï 漢字 🙂 \u2028 "q" \\ <|im_end|>'}]]},
    {"logprobs": [[-0.5, -INF]], "scores": [NAN, 1.0]},
    [1.0, INF],
    [[1, 2], [3.0, -INF]],
    [INF, 1],  # a non-finite first item
    [1, "two", 3.5, NAN],  # mixed items are walked one by one
    [10**30, 1],  # beyond 64 bits: orjson refuses it
    [10**400, 1.0],  # its float sum overflows
    {1: "int key", 2: [3]},
    "lone \ud800 surrogate",
    [Score(NAN)],
    {"x": Score(1.5)},
    (1, 2, (3.0,)),
    [],
    {},
    None,
    0.1 + 0.2,
]


def same(a: object, b: object) -> bool:
    return json.dumps(a) == json.dumps(b)  # NaN != NaN, but its text is equal


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_decodes_to_what_json_dumps_decodes_to(value):
    out = fast_json.dumps(value)
    assert isinstance(out, bytes)
    assert same(json.loads(out), json.loads(json.dumps(value)))
    if value != [10**30, 1]:  # loads reads an int beyond 64 bits as a float (the documented exception)
        assert same(fast_json.loads(out), json.loads(json.dumps(value)))  # and our loads reads it back


def test_a_common_group_takes_the_fast_path_and_is_compact():
    group = {"tokens": [[1, 2]], "scores": [0.5], "messages": [[{"role": "user", "content": "é"}]]}
    assert (
        fast_json.dumps(group)
        == '{"tokens":[[1,2]],"scores":[0.5],"messages":[[{"role":"user","content":"é"}]]}'.encode()
    )


def test_loads_reads_an_int_beyond_64_bits_as_a_float_and_below_exactly():
    assert fast_json.loads(b"[18446744073709551615, -9223372036854775808]") == [2**64 - 1, -(2**63)]
    assert fast_json.loads(b"[100000000000000000000]") == [1e20]


def test_loads_reads_python_json_extensions_and_every_input_type():
    assert same(fast_json.loads(b'{"a": NaN, "b": [Infinity, -Infinity]}'), {"a": NAN, "b": [INF, -INF]})
    for data in (
        '[1, 2.5, "x"]',
        b'[1, 2.5, "x"]',
        bytearray(b'[1, 2.5, "x"]'),
        memoryview(b'[1, 2.5, "x"]'),
    ):
        assert fast_json.loads(data) == [1, 2.5, "x"]


@pytest.mark.parametrize("bad", [b"{bad", b"", b"[1,", "\x00"])
def test_text_that_is_not_json_raises_jsons_error(bad):
    with pytest.raises(json.JSONDecodeError):
        fast_json.loads(bad)


def test_a_type_json_cannot_encode_raises_type_error():
    with pytest.raises(TypeError):
        fast_json.dumps({"x": object()})
