"""``session.labels.*`` (capability ``set_labels``): labels follow ``validate_labels``' rules,
``set_labels`` is a session write, other writes keep labels, and label filters page exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop import Session, SupportsPaging, SupportsRevisions
from agentlooptest._clause import Violation, clause, expect
from agentlooptest._clauses.paging import has, ids, info_of, labels_of, page_all, write_sessions
from agentlooptest._data import DONE, expect_exists
from agentlooptest._harness import Harness, open_sessions

FILTERS = (
    "an application finds its sessions by label (a tenant, an eval run): a label lost, "
    "taken from the wrong session or not validated shows one tenant's sessions to another "
    "or fails the store later, when it is read"
)

_VALID: dict[str, str] = {
    **{f"key-{k:02}": f"value {k}" for k in range(29)},
    "é" * 128: "ü" * 128,
    " spaced Case ": " kept\tverbatim ",
    "k" * 256: "v" * 256,
}
_BAD: tuple[tuple[str, object], ...] = (
    ("33 pairs", {f"k{k}": "v" for k in range(33)}),
    ("an empty key", {"": "v"}),
    ("an empty value", {"team": ""}),
    ("a 257-byte value", {"team": "x" * 257}),
    ("a 258-byte multi-byte key", {"é" * 129: "v"}),
    ("a NUL in a value", {"team": "a\x00b"}),
    ("a value that is not a str", {"team": 5}),
    ("a key that is not a str", {5: "v"}),
    ("not a mapping", [("team", "a")]),
)


async def _revision(store: Any, sid: str) -> int | None:
    return await store.revision(sid) if has(store, SupportsRevisions) else None


async def _expect_labels(store: Any, sid: str, want: Mapping[str, str], did: str) -> None:
    got = await labels_of(store, sid)
    if got is None:
        return  # the store cannot read labels back: only the writes are checked
    expect(got == dict(want), did=did, expected=f"labels {dict(want)!r:.300}", got=got)


@clause(
    "session.labels.rules",
    "set_labels keeps 32 pairs of up to 256 UTF-8 bytes verbatim; 33 pairs, empty, too "
    "long, NUL or non-str text is refused naming labels, and nothing changes",
    capability="set_labels",
    why=FILTERS,
    hint="labels stored as given, without validate_labels (or a column that trims them)",
)
async def _rules(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.set_labels("l", _VALID)
        await _expect_labels(store, "l", _VALID, "set_labels('l', 32 valid pairs), then read")
        before = await _revision(store, "l")
        for what, labels in _BAD:
            did = f"set_labels('l', {what})"
            try:
                await store.set_labels("l", labels)
            except (TypeError, ValueError) as exc:
                expect(
                    "labels" in str(exc),
                    did=did,
                    expected="an error whose message names the field (labels)",
                    got=f"{type(exc).__name__}: {exc}",
                )
            except Exception as exc:
                got = f"{type(exc).__name__}: {exc}"
                raise Violation(did, "TypeError or ValueError", got) from None
            else:
                raise Violation(did, "TypeError or ValueError, nothing stored", "no error")
            await _expect_labels(store, "l", _VALID, did + ", then read the labels")
            now = await _revision(store, "l")
            expect(now == before, did=did + ", then revision('l')", expected=repr(before), got=now)


@clause(
    "session.labels.write",
    "set_labels is a session write: it creates the session, makes its revision larger and "
    "moves it to the front of the listing",
    capability="set_labels",
    why=FILTERS,
    hint="labels written to a side table without touching the session row",
)
async def _write(h: Harness) -> None:
    async with open_sessions(h) as store:
        await store.set_labels("fresh", {"team": "a"})
        await expect_exists(store, "fresh", True, "set_labels('fresh', ...), then exists")
        await write_sessions(store, ["w1", "w2"])
        before = await _revision(store, "w1")
        was = await info_of(store, "w1")
        await store.set_labels("w1", {"team": "b"})
        after = await _revision(store, "w1")
        if before is not None:
            expect(
                after is not None and after > before,
                did="set_labels('w1', ...), then revision('w1')",
                expected=f"a revision larger than {before}",
                got=after,
            )
        now = await info_of(store, "w1")
        if was is not None:
            expect(
                now is not None and now.updated_at >= was.updated_at,
                did="set_labels('w1', ...), then its updated_at",
                expected=f"no earlier than {was.updated_at}",
                got=now,
            )
        if has(store, SupportsPaging):
            first = await store.page_sessions(limit=1)
            expect(
                ids(list(first.sessions)) == ["w1"],
                did="wrote w1 then w2, set_labels('w1', ...), then page_sessions(limit=1)",
                expected="['w1']: the labelled session moved to the front",
                got=first,
            )


@clause(
    "session.labels.kept",
    "put, update_data and finalize keep a session's labels; set_labels({}) clears them; a "
    "deleted session's labels are gone",
    capability="set_labels",
    why=FILTERS,
    hint="put (or a row rewrite) replacing the whole row, labels column included",
)
async def _kept(h: Harness) -> None:
    async with open_sessions(h) as store:
        labels = {"team": "a", "run": "r1"}
        await store.set_labels("s", labels)
        if hasattr(store, "put"):
            await store.put(Session("s", "model-s", "prompt-s", '{"v": 1}'))
            await _expect_labels(store, "s", labels, "set_labels('s', ...), put(Session('s'))")
        await store.update_data("s", '{"v": 2}')
        await _expect_labels(store, "s", labels, "set_labels('s', ...), then update_data")
        await store.finalize("s", DONE)
        await _expect_labels(store, "s", labels, "set_labels('s', ...), then finalize")
        await store.set_labels("s", {})
        await _expect_labels(store, "s", {}, "then set_labels('s', {})")
        if hasattr(store, "delete_session"):
            await store.set_labels("s", labels)
            await store.delete_session("s")
            await store.update_data("s", "{}")
            await _expect_labels(store, "s", {}, "labelled 's', deleted it, wrote it again")


@clause(
    "session.labels.filter",
    "page_sessions(labels=...) returns exactly the sessions carrying every given pair, "
    "newest write first, each once across pages; relabelling moves a session out",
    capability="set_labels",
    why=FILTERS,
    hint="a filter joined with OR, or matching on one pair of several",
)
async def _filter(h: Harness) -> None:
    async with open_sessions(h) as store:
        if not has(store, SupportsPaging):
            return  # no page_sessions: no filters to check
        tagged: list[tuple[str, dict[str, str]]] = []
        for k in range(9):
            labels = {"team": "ab"[k % 2], "env": ("prod", "dev", "test")[k % 3]}
            tagged.append((f"f{k}", labels))
            await store.set_labels(f"f{k}", labels)
        await write_sessions(store, ["unlabelled"])
        for query in ({"team": "a"}, {"team": "a", "env": "prod"}, {"env": "dev"}, {"team": "z"}):
            want = [
                s for s, labels in reversed(tagged) if all(labels[k] == v for k, v in query.items())
            ]
            did = f"labelled f0..f8, then paged labels={query!r} 2 at a time"
            got = ids(await page_all(store, limit=2, did=did, labels=query))
            expect(got == want, did=did, expected=repr(want), got=got)
        await store.set_labels("f0", {"team": "b"})
        did = "relabelled f0 team=b, then paged labels={'team': 'a'}"
        got = ids(await page_all(store, limit=2, did=did, labels={"team": "a"}))
        expect(
            got == ["f8", "f6", "f4", "f2"], did=did, expected="['f8', 'f6', 'f4', 'f2']", got=got
        )
