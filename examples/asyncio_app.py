"""An asyncio app on a SqliteStore: each request handler awaits one loop run."""

import asyncio
import tempfile

from agentloop import Loop, ScriptedModel
from agentloopsql import SqliteStore


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        async with await SqliteStore.open(f"{directory}/agents.db") as store:
            model = ScriptedModel(["Hello!", "Hello!"])
            loop = Loop(model=model, steps=store, sessions=store)

            async def chat(user: str, text: str) -> str:  # e.g. a FastAPI route's body
                async with asyncio.timeout(30):  # asyncio's own deadlines work too
                    return (await loop.run(user, text)).text

            replies = await asyncio.gather(chat("ada", "Hi"), chat("grace", "Hi"))
            print(replies)  # ['Hello!', 'Hello!']
            print([step.content for step in await store.all("ada")])  # ['Hi', 'Hello!']


asyncio.run(main())
