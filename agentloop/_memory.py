"""A run's working memory: loaded from the session, compared after each tool, stored if changed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentloop._tools import ToolContext
from agentloop._validate import parse_json

if TYPE_CHECKING:
    from agentloop._run_stores import RunStores


_canonical = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def canonical_json(data: Any) -> str:
    """The JSON text persisted for a working-memory value (JSON ``null`` for ``None``).

    Only the encoding is checked here; ``parse_json`` runs when the text is
    about to be written, so a tool that leaves data unchanged costs one ``dumps``.

    Raises:
        TypeError, ValueError: ``data`` is not JSON-encodable.
        RecursionError: ``data`` is nested too deeply to encode.
    """
    return _canonical(data)


class WorkingMemory:
    """``ctx.data`` of one run, and what the store and the model last saw of it.

    ``context`` is the ``ToolContext`` handed to every tool; ``stored`` is the
    data text as last stored (or loaded); ``shown`` is the text the model is
    shown (``None`` when the stored text is unreadable). See "Working memory is
    compared, not trusted" in ``docs/decisions.md``.
    """

    context: ToolContext  # set by load, before any tool runs

    def __init__(self, stores: RunStores) -> None:
        self._stores = stores
        self.stored: str | None = None
        self.shown: str | None = None
        self._baseline = "{}"  # canonical JSON of ctx.data as last loaded or stored

    @property
    def bytes_carried(self) -> int:
        """UTF-8 size of the stored snapshot (``FinalizeSummary.data_bytes_carried``)."""
        return len(self.stored.encode("utf-8")) if self.stored is not None else 0

    def load(self, stored: str | None) -> str | None:
        """Start from the stored snapshot (``{}`` when there is none).

        Returns ``None``, or why the snapshot cannot be read back (not JSON, or
        JSON that cannot be re-encoded, e.g. a number that decoded to ``inf``):
        working memory then starts empty, the model is shown no data, and the
        stored text is kept until a tool writes new data over it.
        """
        self.stored = self.shown = stored  # already set when the session was read
        if stored is not None:
            try:
                data = parse_json(stored, "data")
                self._baseline = canonical_json(data)
            except (TypeError, ValueError, RecursionError) as exc:
                self.shown = None
                self.context = ToolContext(self._stores.session_id)
                self._baseline = canonical_json(self.context.data)
                return str(exc)
            self.context = ToolContext(self._stores.session_id, data)
            return None
        self.context = ToolContext(self._stores.session_id)  # data {}: the baseline "{}"
        return None

    def discard_changes(self) -> None:
        """Put ``ctx.data`` back to the last loaded or stored value."""
        self.context.data = json.loads(self._baseline)

    def changes(self) -> tuple[str, Any] | None:
        """``ctx.data`` as the JSON text to store and its decoded value, or ``None`` if unchanged.

        The decoded value is what the rest of the run must see after the write
        (``{1: "a"}`` becomes ``{"1": "a"}``): pass both to :meth:`store`.

        Raises:
            TypeError, ValueError, RecursionError: ``ctx.data`` is not JSON (or
                holds NUL or lone surrogates no store can keep); it is put back
                to the last loaded or stored value.
        """
        data = self.context.data
        if data.__class__ is dict and not data and self._baseline == "{}":
            return None  # still the empty object: nothing to encode
        try:
            canonical = canonical_json(data)
            if canonical == self._baseline:
                return None
            return canonical, parse_json(canonical, "data")
        except (TypeError, ValueError, RecursionError):
            self.discard_changes()
            raise

    async def store(self, changes: tuple[str, Any]) -> None:
        """Write ``changes`` (from :meth:`changes`); from now on the run sees what was stored.

        Raises:
            StoreError: ``update_data`` failed.
        """
        canonical, decoded = changes
        await self._stores.update_data(canonical)
        self._baseline = self.stored = self.shown = canonical
        self.context.data = decoded
