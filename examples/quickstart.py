"""Seed a session and append/read steps with the in-memory stores."""

import trio

from agentloop import RunStep, Session, StepType
from agentloopmem import SessionStore, StepStore


async def main() -> None:
    steps, sessions = StepStore(), SessionStore()
    await sessions.put(Session("demo", model="m-1", system_prompt="Be brief."))
    await sessions.update_data("demo", '{"todo": ["write tests"]}')
    for i, text in enumerate(["hi", "hello!", "what's next?"]):
        kind = StepType.user if i % 2 == 0 else StepType.response
        await steps.append(RunStep("demo", i, kind, content=text))
    window = await steps.last_n("demo", 2)  # the newest two, oldest first
    print([s.content for s in window])  # ['hello!', "what's next?"]
    print((await sessions.get("demo")).data)  # {"todo": ["write tests"]}


trio.run(main)
