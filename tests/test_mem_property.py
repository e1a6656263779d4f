"""Property: any sequence of appends across sessions; last_n(k) is the model list's tail."""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import RunStep, StepType
from agentloopmem import StepStore

SESSIONS = ["a", "B", "b"]

appends = st.lists(
    st.tuples(st.sampled_from(SESSIONS), st.integers(0, 2**31 - 1), st.text(max_size=8)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=appends, k=st.integers(1, 70))
def test_last_n_is_the_tail_of_a_plain_list(ops: list[tuple[str, int, str]], k: int) -> None:
    """For every session, last_n(k) equals the last k of the steps appended to it, in order."""
    model: dict[str, list[RunStep]] = {sid: [] for sid in SESSIONS}

    async def run() -> None:
        store = StepStore()
        for sid, index, content in ops:
            step = RunStep(sid, index, StepType.user, content=content)
            model[sid].append(step)
            await store.append(step)
        for sid in SESSIONS:
            assert await store.last_n(sid, k) == model[sid][-k:]

    trio.run(run)
