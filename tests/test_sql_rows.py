"""The SQL stores' row rules for sessions and listings (``_codec.session_of``, ``_codec.info``):
a row that plainly keeps the type's rules is built without its validators and equals the
checked value; any other row goes through the constructor and fails as it does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import RunStatus, Session, SessionInfo
from agentloopsql import _codec

T = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
ids = st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s)
statuses = st.none() | st.sampled_from([s.value for s in RunStatus])
totals = st.integers(min_value=0, max_value=2**63 - 1)
times = st.datetimes(timezones=st.just(UTC))


@given(ids, statuses, totals, times, times)
def test_a_listing_row_that_keeps_the_rules_equals_the_checked_info(
    sid: str, status: str | None, total: int, created: datetime, updated: datetime
) -> None:
    got = _codec.info(sid, status, total, created, updated)
    checked = SessionInfo(sid, status, total, created, updated)
    assert got == checked
    assert type(got.status) is type(checked.status)
    assert type(got.labels) is type(checked.labels)
    assert dict(got.labels) == {}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (("s", "weird", 0, T, T), "RunStatus"),
        (("s", None, -1, T, T), "step_count"),
        (("s", None, 2**63, T, T), "step_count"),
        (("s", None, True, T, T), "step_count"),
        (("", None, 0, T, T), "id"),
        (("a\x00b", None, 0, T, T), "id"),
        (("s", None, 0, "2026-01-01", T), "created_at"),
    ],
)
def test_a_listing_row_that_breaks_a_rule_is_refused_naming_it(
    row: tuple[object, ...], message: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        _codec.info(*row)  # type: ignore[arg-type]


def test_a_listing_row_in_another_zone_or_with_labels_is_converted_as_the_type_does() -> None:
    zoned = T.astimezone(timezone(timedelta(hours=5, minutes=45)))
    got = _codec.info("s", None, 0, zoned, zoned, '{"team":"a"}')
    assert got.created_at.tzinfo is UTC
    assert got == SessionInfo("s", None, 0, T, T, labels={"team": "a"})


@pytest.mark.parametrize(
    ("model", "prompt", "data"),
    [
        ("m", "p", None),
        ("m", "p", '{"a": [1, 2.5, "x"]}'),
        ("mödel", "prömpt", '{"é": "\\u00e9"}'),
        ("m", "p\x00q", "[]"),
    ],
)
def test_a_session_row_equals_the_checked_session(
    model: str, prompt: str, data: str | None
) -> None:
    assert _codec.session_of("s", model, prompt, data) == Session("s", model, prompt, data)


@pytest.mark.parametrize(
    ("model", "prompt", "data", "field"),
    [
        ("m\x00", "p", None, "model"),
        (3, "p", None, "model"),
        ("m", None, None, "system_prompt"),
        ("m", "p", "{", "data"),
        ("m", "p", "[NaN]", "data"),
        ("m", "p", '["\\u0000"]', "data"),
    ],
)
def test_a_session_row_that_breaks_a_rule_is_refused_naming_the_field(
    model: object, prompt: object, data: object, field: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        _codec.session_of("s", model, prompt, data)
