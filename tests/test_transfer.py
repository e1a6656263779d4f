"""Export, import and copy: the JSON Lines format, round trips, refusals, streaming."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest

from agentloop import (
    FinalizeSummary,
    RunStatus,
    RunStep,
    Session,
    SessionExistsError,
    SessionInfo,
    StepType,
    copy_sessions,
    export_sessions,
    import_sessions,
)
from agentloopmem import MemoryStore, SessionStore, StepStore

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)


async def seeded(sessions: int = 3, steps: int = 4) -> MemoryStore:
    """A store with labelled, finalized sessions whose steps use every field."""
    store = MemoryStore()
    for n in range(sessions):
        session_id = f"s{n}"
        info = SessionInfo(
            session_id,
            RunStatus.completed,
            7 + n,
            T0,
            T0 + timedelta(hours=n),
            labels={"n": str(n)},
        )
        final = FinalizeSummary(RunStatus.completed, 1, 2, 3, 4, 5)
        data = '{"b": [1, 2.5, "x"], "a": {"z": null}}'
        await store.restore_session(Session(session_id, "model", "prompt\n", data), info, final)
        await store.append_many(
            [
                RunStep(
                    session_id,
                    index,
                    StepType.tool_call,
                    f"content \x00 é 🎉 {index}",
                    '{"z": 1, "a": [true, false]}',
                    index,
                    index + 1,
                    index + 2,
                    T0 + timedelta(microseconds=index),
                )
                for index in range(steps)
            ]
        )
    return store


def _semantic(step: RunStep) -> tuple[object, ...]:
    fields = attrs.astuple(step, recurse=False)
    return (*fields[:4], json.loads(step.tool_args), *fields[5:])


async def snapshot(store: MemoryStore) -> list[tuple[object, ...]]:
    """Everything the format carries, read back through the store (JSON compared as JSON)."""
    out = []
    for info in await store.list_sessions(limit=100):
        session = await store.get(info.id)
        data = json.loads(session.data) if session.data is not None else None
        steps = [_semantic(step) for step in await store.all(info.id)]
        out.append(
            (info, attrs.evolve(session, data=None), data, await store.final(info.id), steps)
        )
    return sorted(out, key=lambda item: str(item[0]))


class TestRoundTrip:
    async def test_import_of_an_export_holds_the_same_sessions(self, tmp_path: Path) -> None:
        source = await seeded()
        path = tmp_path / "out.jsonl"
        report = await export_sessions(source, source, path)
        assert (report.sessions, report.steps, report.changed) == (3, 12, ())
        target = MemoryStore()
        imported = await import_sessions(target, target, path)
        assert (imported.sessions, imported.steps, imported.notes) == (3, 12, ())
        assert await snapshot(target) == await snapshot(source)

    async def test_export_of_what_was_imported_is_the_same_file(self, tmp_path: Path) -> None:
        source = await seeded()
        first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
        await export_sessions(source, source, first)
        target = MemoryStore()
        await import_sessions(target, target, first)
        await export_sessions(target, target, second)
        assert first.read_text(encoding="utf-8") == second.read_text(encoding="utf-8")

    async def test_the_format(self, tmp_path: Path) -> None:
        """A header, a session then its steps, an end record; JSON texts canonical."""
        source = await seeded(sessions=1, steps=1)
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path)
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert records[0] == {"format": "agentloop-sessions", "version": 1}
        session = records[1]["session"]
        assert session["data"] == '{"a":{"z":null},"b":[1,2.5,"x"]}'
        assert (session["row"], session["labels"], session["step_count"]) == (True, {"n": "0"}, 7)
        assert session["created_at"] == "2026-03-04T05:06:07.891011+00:00"
        assert records[2]["step"]["tool_args"] == '{"a":[true,false],"z":1}'
        assert records[-1] == {"end": {"sessions": 1, "steps": 1}}

    async def test_chosen_sessions_only(self, tmp_path: Path) -> None:
        source = await seeded()
        path = tmp_path / "out.jsonl"
        report = await export_sessions(source, source, path, session_ids=["s2", "s0"])
        assert report.sessions == 2
        target = MemoryStore()
        await import_sessions(target, target, path)
        assert sorted(i.id for i in await target.list_sessions()) == ["s0", "s2"]

    async def test_steps_without_a_session_row_come_back_as_steps_only(
        self, tmp_path: Path
    ) -> None:
        source = MemoryStore()
        await source.append(RunStep("orphan", 0, StepType.user, content="hi"))
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path, session_ids=["orphan"])
        target = MemoryStore()
        await import_sessions(target, target, path)
        assert not await target.exists("orphan")
        assert await target.all("orphan") == await source.all("orphan")

    async def test_separate_stores_without_restore_start_totals_afresh(
        self, tmp_path: Path
    ) -> None:
        """A destination without restore_session gets put/set_labels/finalize, and a note."""
        source = await seeded(sessions=1)
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path)
        steps, sessions = StepStore(), _NoRestore()
        report = await import_sessions(steps, sessions, path)
        assert report.notes == (
            "the destination has no restore_session: run totals and times start afresh",
        )
        got, expected = await sessions.get("s0"), await source.get("s0")
        assert attrs.evolve(got, data=None) == attrs.evolve(expected, data=None)
        assert json.loads(got.data or "") == json.loads(expected.data or "")
        assert [_semantic(s) for s in await steps.all("s0")] == [
            _semantic(s) for s in await source.all("s0")
        ]


class _NoRestore(SessionStore):
    restore_session = None  # type: ignore[assignment]


class TestRefusals:
    async def test_an_existing_session_refuses_the_whole_import(self, tmp_path: Path) -> None:
        source = await seeded()
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path)
        target = MemoryStore()
        await target.update_data("s1", '"mine"')
        with pytest.raises(SessionExistsError, match=r"^1 session\(s\) of the export exist"):
            await import_sessions(target, target, path)
        assert [i.id for i in await target.list_sessions()] == ["s1"]
        assert (await target.get("s1")).data == '"mine"'

    async def test_replace_replaces(self, tmp_path: Path) -> None:
        source = await seeded()
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path)
        target = MemoryStore()
        await target.update_data("s1", '"mine"')
        await target.append(RunStep("s1", 99, StepType.user))
        report = await import_sessions(target, target, path, replace=True)
        assert report.replaced == ("s1",)
        assert await snapshot(target) == await snapshot(source)

    @pytest.mark.parametrize(
        ("mangle", "pattern"),
        [
            (lambda lines: lines[:-1], r"line 4: the export ends without its end record"),
            (lambda lines: ["{}", *lines[1:]], r"line 1: not an agentloop export"),
            (lambda lines: ["hello", *lines[1:]], r"line 1: not a JSON object"),
            (
                lambda lines: ['{"format": "agentloop-sessions", "version": 2}', *lines[1:]],
                r"line 1: the export's format version is 2, newer than this agentloop reads",
            ),
            (
                lambda lines: [
                    *lines[:2],
                    lines[2].replace('"step_index":0', '"step_index":-1'),
                    *lines[3:],
                ],
                r"line 3: step_index must be",
            ),
            (
                lambda lines: [*lines[:2], lines[1], *lines[2:]],
                r"line 3: session 's0' appears twice",
            ),
            (lambda lines: [*lines, lines[1]], r"line 6: a record after the end record"),
            (lambda lines: [lines[0], lines[2], *lines[1:]], r"line 2: a step before any session"),
            (
                lambda lines: [*lines[:-1], '{"end": {"sessions": 9, "steps": 2}}'],
                r"line 5: the end record says",
            ),
        ],
    )
    async def test_a_damaged_file_imports_nothing(
        self, tmp_path: Path, mangle: object, pattern: str
    ) -> None:
        source = await seeded(sessions=1, steps=2)
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path)
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join(mangle(lines)) + "\n", encoding="utf-8")  # type: ignore[operator]
        target = MemoryStore()
        with pytest.raises(ValueError, match=pattern):
            await import_sessions(target, target, path)
        assert await target.list_sessions() == []
        assert await target.all("s0") == []

    async def test_a_failure_part_way_removes_what_was_written(self, tmp_path: Path) -> None:
        source = await seeded(sessions=3)
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path)
        target = _FailsOnSession("s1")
        with pytest.raises(RuntimeError, match="disk full"):
            await import_sessions(target, target, path)
        assert await target.list_sessions() == []
        assert await target.all("s0") == []


class _FailsOnSession(MemoryStore):
    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.failing = session_id

    async def append_many(self, steps: object) -> None:
        if any(s.session_id == self.failing for s in steps):  # type: ignore[attr-defined]
            raise RuntimeError("disk full")
        await super().append_many(steps)  # type: ignore[arg-type]


class TestStreaming:
    async def test_a_long_session_moves_in_bounded_chunks(self, tmp_path: Path) -> None:
        """Export reads ranges (never all()) and import writes batches of at most 1,000."""
        source = _CountingRanges()
        await source.append_many([RunStep("big", n, StepType.user) for n in range(2_500)])
        path = tmp_path / "out.jsonl"
        await export_sessions(source, source, path, session_ids=["big"])
        assert source.limits == [1000, 1000, 1000]
        target = _CountingBatches()
        await import_sessions(target, target, path)
        assert target.sizes == [1000, 1000, 500]
        assert len(await target.all("big")) == 2_500


class _CountingRanges(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.limits: list[int] = []

    async def steps_after(self, session_id: str, after: int, limit: int) -> list[RunStep]:
        self.limits.append(limit)
        return await super().steps_after(session_id, after, limit)

    async def all(self, session_id: str) -> list[RunStep]:
        raise AssertionError("export must not read the whole trace at once")


class _CountingBatches(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    async def append_many(self, steps: object) -> None:
        self.sizes.append(len(steps))  # type: ignore[arg-type]
        await super().append_many(steps)  # type: ignore[arg-type]


class TestCopy:
    async def test_copies_everything_and_reports_progress(self) -> None:
        source, target = await seeded(), MemoryStore()
        seen: list[tuple[int, int]] = []
        report = await copy_sessions(
            source, source, target, target, on_progress=lambda s, n: seen.append((s, n))
        )
        assert (report.sessions, report.steps) == (3, 12)
        assert await snapshot(target) == await snapshot(source)
        assert seen[-1] == (3, 12)

    async def test_an_existing_session_refuses_the_copy(self) -> None:
        source, target = await seeded(), MemoryStore()
        await target.update_data("s0", "1")
        with pytest.raises(SessionExistsError, match="nothing was copied"):
            await copy_sessions(source, source, target, target)
        assert [i.id for i in await target.list_sessions()] == ["s0"]

    async def test_a_session_written_while_it_is_read_is_reported(self) -> None:
        source = await seeded(sessions=2)
        target = _WritesSourceOnAppend(source, "s0")
        report = await copy_sessions(source, source, target, target)
        assert report.changed == ("s0",)


class _WritesSourceOnAppend(MemoryStore):
    """Writes the source session while its copy is being written (a concurrent writer)."""

    def __init__(self, source: MemoryStore, session_id: str) -> None:
        super().__init__()
        self.source, self.session_id = source, session_id

    async def restore_session(self, session, info, final):  # type: ignore[no-untyped-def]
        await super().restore_session(session, info, final)
        if session.id == self.session_id:
            await self.source.update_data(session.id, '"changed"')


async def test_the_documented_example_imports_and_exports_unchanged(tmp_path: Path) -> None:
    """The example in docs/export-format.md is a valid export that round-trips byte for byte."""
    page = (Path(__file__).parents[1] / "docs" / "export-format.md").read_text(encoding="utf-8")
    example = page.split("```json\n", 1)[1].split("```", 1)[0]
    source = tmp_path / "example.jsonl"
    source.write_text(example, encoding="utf-8")
    store = MemoryStore()
    report = await import_sessions(store, store, source)
    assert (report.sessions, report.steps) == (1, 2)
    again = tmp_path / "again.jsonl"
    await export_sessions(store, store, again)
    assert again.read_text(encoding="utf-8") == example
