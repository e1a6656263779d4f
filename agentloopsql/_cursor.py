"""``page_sessions`` cursors: opaque, signed with a secret kept in the database.

A cursor is ``base64url("<position>.<query>.<mac>")``: the paging position
(a ``write_seq`` or ``created_seq``), a short digest of the query (order and
label filter) it was made for, and an HMAC-SHA256 of both under the
database's ``cursor_secret`` (written once by the schema migration, in the
``meta`` table). Any handle onto the same database accepts it; a cursor of
another database, a forged one, or one of another query is refused with a
``ValueError`` naming ``cursor`` before any page is read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping

from agentloop._shared import preview

ORDERS = ("updated", "created")


def query_tag(order: str, labels: Mapping[str, str]) -> str:
    """A short digest of one query: its order and its label filter (in any key order)."""
    text = json.dumps([order, sorted(labels.items())], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _mac(secret: str, tag: str, position: int) -> str:
    message = f"{tag}.{position}".encode("ascii")
    return hmac.new(secret.encode("ascii"), message, hashlib.sha256).hexdigest()[:32]


def encode(secret: str, tag: str, position: int) -> str:
    """The cursor for the page after ``position`` of the query ``tag``."""
    raw = f"{position}.{tag}.{_mac(secret, tag, position)}"
    return base64.urlsafe_b64encode(raw.encode("ascii")).decode("ascii").rstrip("=")


def decode(secret: str, tag: str, cursor: object) -> int:
    """The position ``cursor`` carries, once it is known to be this database's, for ``tag``.

    Raises:
        TypeError: ``cursor`` is not a str.
        ValueError: the database did not make ``cursor``, or made it for another query.
    """
    if not isinstance(cursor, str):
        raise TypeError(f"cursor must be a str or None, got {preview(cursor)}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        position_text, made_for, mac = raw.split(".")
        position = int(position_text)
        genuine = hmac.compare_digest(mac, _mac(secret, made_for, position))
    except (ValueError, binascii.Error, UnicodeError):
        genuine = False
    if not genuine:
        raise ValueError(
            "cursor must be one this store's page_sessions returned (on this database), "
            f"got {preview(cursor)}"
        )
    if made_for != tag:
        raise ValueError(
            "cursor was made for another order or label filter; page with the same "
            f"order and labels it came from, got {preview(cursor)}"
        )
    return position
