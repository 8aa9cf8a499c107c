"""What the client tests share: a chat to send, and ways to read a stream and wait on the fake."""

import asyncio
import time

MESSAGES = [{"role": "system", "content": "You narrate."}, {"role": "user", "content": "I open the door."}]


async def collect(stream):
    return [chunk async for chunk in stream]


async def wait_for(condition, seconds=2.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
