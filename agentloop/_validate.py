"""The one home of argument checks, field validators and trusted construction.

Every check of a field or argument lives here (in :mod:`agentloop._checks`,
with their attrs form in :mod:`agentloop._fields`): text, key text, names,
session ids, lease owners, int32/int64, seconds, JSON text and values, enum members;
how a store judges a presented lease lives in :mod:`agentloop._lease_rules`. Each
raises ``TypeError`` for the wrong type, then ``ValueError`` for a bad value,
with a message naming the field, the rule and at most ~60 characters of the
value (:func:`preview`).

Text rules differ on purpose (``docs/decisions.md``): NUL is refused in ids
and names (``key_text``, ``name``, session ids) and allowed in content
(``text``); lone surrogates are refused everywhere.

This is the one private module of ``agentloop`` that its sibling packages
(``agentloopmem``, ``agentloopsql``, ``agentlooptest``) may import; anything
else they use is a public ``agentloop`` name.
"""

from agentloop._batch_checks import check_revision, check_session_ids, check_steps
from agentloop._checks import (
    INT32_MAX,
    INT64_MAX,
    JSON_DEPTH_MAX,
    OWNER_MAX_BYTES,
    SECONDS_MAX,
    SESSION_ID_MAX_BYTES,
    check_int,
    check_json_value,
    check_seconds,
    check_text,
    has_lone_surrogate,
    parse_json,
    preview,
    validate_json,
    validate_n,
    validate_owner,
    validate_session_id,
)
from agentloop._fields import (
    Validator,
    aware_datetime,
    int32,
    int64,
    json_text,
    key_text,
    member_of,
    name,
    one_of,
    positive_int32,
    schema,
    seconds,
    seconds_or_none,
    session_id,
    text,
    to_member,
    to_tuple,
    to_utc,
    tuple_of,
)
from agentloop._lease_rules import Grant, check_fence, check_granted, check_renewable
from agentloop._trusted import trusted_builder

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "JSON_DEPTH_MAX",
    "OWNER_MAX_BYTES",
    "SECONDS_MAX",
    "SESSION_ID_MAX_BYTES",
    "Grant",
    "Validator",
    "aware_datetime",
    "check_fence",
    "check_granted",
    "check_int",
    "check_json_value",
    "check_renewable",
    "check_revision",
    "check_seconds",
    "check_session_ids",
    "check_steps",
    "check_text",
    "has_lone_surrogate",
    "int32",
    "int64",
    "json_text",
    "key_text",
    "member_of",
    "name",
    "one_of",
    "parse_json",
    "positive_int32",
    "preview",
    "schema",
    "seconds",
    "seconds_or_none",
    "session_id",
    "text",
    "to_member",
    "to_tuple",
    "to_utc",
    "trusted_builder",
    "tuple_of",
    "validate_json",
    "validate_n",
    "validate_owner",
    "validate_session_id",
]
