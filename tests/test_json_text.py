"""The JSON text check's fast path decodes exactly as the plain decoder does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop._validate import _DECODER, _decode, parse_json, validate_json

_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_texts = st.one_of(
    _values.map(json.dumps),
    _values.map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.tuples(_values.map(json.dumps), st.sampled_from(["", " ", "}", "]", ",1", "x"])).map(
        "".join
    ),
    st.text(alphabet='{}[]",:0123456789.eE+-tfnrulaseNI \\', max_size=20),
)


def _outcome(decode: Any, text: str) -> tuple[str, object]:
    try:
        return "ok", decode(text)
    except ValueError as exc:
        return "error", str(exc)
    except RecursionError:
        return "error", "recursion"


@given(_texts)
def test_the_fast_path_decodes_and_refuses_as_the_plain_decoder_does(text: str) -> None:
    """Whatever the text (whitespace around it, trailing data, broken), the check's decode
    gives the same value or the same error as the strict decoder without the fast path."""
    ours, plain = _outcome(_decode, text), _outcome(_DECODER.decode, text)
    assert ours[0] == plain[0]
    assert ours[1] == plain[1]


def test_the_fast_path_keeps_the_errors_it_skips_scanning_for() -> None:
    """Trailing data after a closed object or array is still refused."""
    for text in ('{"a": 1}}', "[1]]", '{"a": 1} x', "[] x"):
        assert _outcome(_decode, text)[0] == "error", text


@given(_texts)
def test_validate_json_accepts_and_refuses_what_parse_json_does(text: str) -> None:
    """The check's one-scan path for plain objects and arrays agrees with the full parse,
    error wording included."""
    ours = _outcome(lambda t: validate_json(t, "data"), text)
    full = _outcome(lambda t: parse_json(t, "data"), text)
    assert ours[0] == full[0]
    if ours[0] == "error":
        assert ours[1] == full[1]


def test_validate_json_still_refuses_escaped_nul_and_surrogates() -> None:
    """An escape that decodes to NUL or a lone surrogate is refused, as before."""
    for text in ('["\\u0000"]', '{"a": "\\ud800"}'):
        with pytest.raises(ValueError, match="NUL or lone surrogates"):
            validate_json(text, "data")
