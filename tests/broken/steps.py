"""Broken step stores: each keeps one promise badly."""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import timedelta
from typing import Any, ClassVar

import anyio
import attrs

from agentloop import RunStep, StepType

from ._good import GoodSteps


class NewestFirst(GoodSteps):
    """last_n returns its window newest first."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        return steps[-n:][::-1]


class OldestN(GoodSteps):
    """last_n returns the first n steps instead of the last n."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        return steps[:n]


class WindowWraps(GoodSteps):
    """last_n computes the start as len - n, which wraps around when n > count."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        return steps[len(steps) - n :]


class CapsHistory(GoodSteps):
    """Keeps only the newest 4,096 steps of a session (a fixed-size ring)."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        return steps[-4096:][-n:]


class SortsByIndex(GoodSteps):
    """Orders steps by step_index (ORDER BY step_index)."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        return sorted(steps, key=lambda s: s.step_index)[-n:]


class SortsByTime(GoodSteps):
    """Orders steps by created_at (ORDER BY created_at)."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        return sorted(steps, key=lambda s: s.created_at)[-n:]


class GlobalWindow(GoodSteps):
    """Takes the newest n steps of the whole store, then filters by session."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[RunStep] = []

    async def append(self, step: RunStep) -> None:
        await super().append(step)
        self.log.append(step)

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await super().last_n(session_id, n)
        return [s for s in self.log[-n:] if s.session_id == session_id]


class DropsToolArgs(GoodSteps):
    """Never stores tool_args (the column was forgotten)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, tool_args="{}")


class DropsMicroseconds(GoodSteps):
    """Keeps created_at to the second (a TIMESTAMP(0) column)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, created_at=step.created_at.replace(microsecond=0))


class ShiftsTime(GoodSteps):
    """Stores local wall time as if it were UTC (loses the offset)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, created_at=step.created_at + timedelta(hours=2))


class ClipsInt32(GoodSteps):
    """Clips integers to 2**31 - 2 (an off-by-one column bound)."""

    def stored(self, step: RunStep) -> RunStep:
        names = ("step_index", "duration_ms", "prompt_tokens", "completion_tokens")
        return attrs.evolve(step, **{k: min(getattr(step, k), 2**31 - 2) for k in names})


class LosesStepType(GoodSteps):
    """Stores every step as a 'user' step unless it is a summary."""

    def stored(self, step: RunStep) -> RunStep:
        kind = step.step_type if step.step_type is StepType.summary else StepType.user
        return attrs.evolve(step, step_type=kind)


class StripsContent(GoodSteps):
    """Strips trailing whitespace from content."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, content=step.content.rstrip())


class DropsNul(GoodSteps):
    """Removes NUL characters from content (a C-string driver)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, content=step.content.replace("\x00", ""))


class Truncates64K(GoodSteps):
    """Truncates content at 65,535 characters (a TEXT column)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, content=step.content[:65535])


class LikeIds(GoodSteps):
    """Finds a session's steps with LIKE semantics: % and _ in an id are wildcards."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await super().last_n(session_id, n)
        pattern = re.escape(session_id).replace("%", ".*").replace("_", ".")
        found = [
            s for sid, steps in self.steps.items() if re.fullmatch(pattern, sid) for s in steps
        ]
        return found[-n:]


class CaseFolds(GoodSteps):
    """Case-folds ids (a NOCASE collation)."""

    def key(self, session_id: str) -> str:
        return session_id.casefold()


class TrimsIds(GoodSteps):
    """Trims and NFC-normalizes ids."""

    def key(self, session_id: str) -> str:
        return unicodedata.normalize("NFC", session_id.strip())


class TruncatedKeys(GoodSteps):
    """Keys sessions by the first 8 characters of the id (a CHAR(8) column)."""

    def key(self, session_id: str) -> str:
        return session_id[:8]


class NoValidation(GoodSteps):
    """Does not validate n: 0 returns everything (steps[-0:]), True counts as 1."""

    async def last_n(self, session_id: str, n: Any) -> list[RunStep]:
        await self.enter()
        got = list(self.steps.get(session_id, [])[-n:]) if isinstance(n, int) else []
        await self.leave()
        return got


class UnknownRaises(GoodSteps):
    """Raises KeyError for a session it never saw."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        if session_id not in self.steps:
            raise KeyError(session_id)
        return await super().last_n(session_id, n)


class Aliases(GoodSteps):
    """Returns its own list when the window covers the whole history."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await super().last_n(session_id, n)
        steps = self.steps.get(session_id, [])
        return steps if n >= len(steps) else steps[-n:]


class AcceptsAnything(GoodSteps):
    """Appends whatever it is given, without a type check."""

    async def append(self, step: Any) -> None:
        await self.enter()
        sid = getattr(step, "session_id", "s")
        self.steps.setdefault(sid, []).append(step)
        await self.leave()


class SharedState(GoodSteps):
    """Keeps steps in a class attribute: every instance sees the same store."""

    shared: ClassVar[dict[str, list[RunStep]]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.steps = self.shared


class LostAppends(GoodSteps):
    """Read-modify-write across an await: concurrent appends to a session overwrite each other."""

    async def append(self, step: RunStep) -> None:
        await self.enter()
        current = list(self.steps.get(step.session_id, []))
        await anyio.lowlevel.checkpoint()
        self.steps[step.session_id] = [*current, step]


class CrossedAppends(GoodSteps):
    """Stages the step in one slot shared by all sessions, then commits whatever is staged."""

    staged: RunStep | None = None

    async def append(self, step: RunStep) -> None:
        await self.enter()
        self.staged = step
        await anyio.lowlevel.checkpoint()
        assert self.staged is not None
        self.steps.setdefault(self.staged.session_id, []).append(self.staged)


class PartialOnCancel(GoodSteps):
    """Writes the step without its tool_args, yields, then fills them in."""

    async def append(self, step: RunStep) -> None:
        await self.enter()
        steps = self.steps.setdefault(step.session_id, [])
        steps.append(attrs.evolve(step, tool_args="{}"))
        await anyio.lowlevel.checkpoint()
        steps[-1] = step


class LeaksLockOnCancel(GoodSteps):
    """Takes a lock around reads and does not release it when cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = anyio.Lock()

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await self.lock.acquire()
        got = await super().last_n(session_id, n)
        await anyio.lowlevel.checkpoint()
        self.lock.release()
        return got

    async def append(self, step: RunStep) -> None:
        async with self.lock:
            await super().append(step)


class IgnoresClose(GoodSteps):
    """aclose does nothing: the store keeps answering."""

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()


class AllNewestFirst(GoodSteps):
    """all returns the trace newest first."""

    async def all(self, session_id: str) -> list[RunStep]:
        return (await super().all(session_id))[::-1]


class DeleteKeepsSteps(GoodSteps):
    """delete_session reports success but leaves the steps."""

    async def delete_session(self, session_id: str) -> bool:
        await self.enter()
        await self.leave()
        return session_id in self.steps


class WindowMath(GoodSteps):
    """An off-by-one in a paged read: the window slips when it starts 2 or 3 steps in."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        if len(steps) - n in (2, 3):
            return steps[-n - 1 : -1]
        return steps[-n:]


class PartialDelete(GoodSteps):
    """delete_session removes steps one at a time, yielding in between."""

    async def delete_session(self, session_id: str) -> bool:
        await self.enter()
        steps = self.steps.get(session_id)
        if not steps:
            return False
        while steps:
            steps.pop()
            await anyio.lowlevel.checkpoint()
        del self.steps[session_id]
        return True


class IndexPrimaryKey(GoodSteps):
    """Keys steps by (session, step_index) and replaces on conflict: repeated indices overwrite."""

    async def append(self, step: RunStep) -> None:
        await super().append(step)
        steps = self.steps[step.session_id]
        earlier = [k for k, s in enumerate(steps[:-1]) if s.step_index == step.step_index]
        for k in earlier:
            steps[k] = steps[-1]
        if earlier:
            steps.pop()


class TornReads(GoodSteps):
    """last_n copies the window one step at a time, yielding in between, from a moving end."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        await super().last_n(session_id, n)
        steps = self.steps.get(session_id, [])
        got: list[RunStep] = []
        for k in range(min(n, len(steps))):
            got.insert(0, steps[len(steps) - 1 - k])
            await anyio.lowlevel.checkpoint()
        return got


class PagedReads(GoodSteps):
    """Windows longer than 64 are read in pages of 64 from a moving end, yielding between pages."""

    PAGE = 64

    async def paged(self, session_id: str, n: int) -> list[RunStep]:
        """The newest ``n`` steps, assembled page by page (torn under concurrent appends)."""
        got: list[RunStep] = []
        while True:
            steps = self.steps.get(session_id, [])
            total = min(n, len(steps))
            if len(got) >= total:
                return got
            end = len(steps) - len(got)
            got[:0] = steps[max(end - self.PAGE, len(steps) - total) : end]
            await anyio.lowlevel.checkpoint()

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        got = await super().last_n(session_id, n)
        return got if n <= self.PAGE else await self.paged(session_id, n)

    async def all(self, session_id: str) -> list[RunStep]:
        await super().all(session_id)
        return await self.paged(session_id, 2**62)


class SortsByTimeWhenLong(GoodSteps):
    """Windows of more than 9 steps are sorted by created_at (only the 'long history' path)."""

    def window(self, steps: list[RunStep], n: int) -> list[RunStep]:
        got = steps[-n:]
        return sorted(got, key=lambda s: s.created_at) if len(got) > 9 else got


def _drop_nulls(text: str) -> str:
    value = json.loads(text)
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v is not None}
    return json.dumps(value)


class DropsNullArgs(GoodSteps):
    """Drops top-level keys whose value is null from tool_args (exclude_none)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, tool_args=_drop_nulls(step.tool_args))


class DropsBigToolArgs(GoodSteps):
    """tool_args over 64 KiB are silently replaced by '{}' (a column too small)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, tool_args="{}") if len(step.tool_args) > 65535 else step


class PartialFirstAppend(GoodSteps):
    """A session's first append writes the row, then its tool_args after a round trip."""

    async def append(self, step: RunStep) -> None:
        if self.steps.get(step.session_id):
            await super().append(step)
            return
        placeholder = attrs.evolve(step, tool_args="{}")
        await super().append(placeholder)
        await anyio.lowlevel.checkpoint()
        trace = self.steps[step.session_id]
        trace[trace.index(placeholder)] = step


_EMPTY: list[RunStep] = []


class SharedEmpty(GoodSteps):
    """last_n hands every unknown session the same empty list object."""

    async def last_n(self, session_id: str, n: int) -> list[RunStep]:
        got = await super().last_n(session_id, n)
        return got if got else _EMPTY


class StripsBom(GoodSteps):
    """Strips a leading byte order mark from content (a utf-8-sig round trip)."""

    def stored(self, step: RunStep) -> RunStep:
        return attrs.evolve(step, content=step.content.removeprefix("\ufeff"))
