"""What the async tests share: a loop run under a bound, and a ticker that counts the loop's turns."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from run_supervisor import SupervisorConfig

T = TypeVar("T")
CONFIG = SupervisorConfig(shutdown_at_exit=False)


def run_async(main: Callable[[], Coroutine[Any, Any, T]], *, bound: float = 30.0) -> T:
    """Run ``main()`` on a new loop; it fails with ``TimeoutError`` if it takes longer than ``bound``."""

    async def bounded() -> T:
        async with asyncio.timeout(bound):
            return await main()

    return asyncio.run(bounded())


class Ticker:
    """A task on the running loop that counts its turns (``turns``) until ``stop()``."""

    def __init__(self) -> None:
        self.turns = 0
        self._done = False
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while not self._done:
            self.turns += 1
            await asyncio.sleep(0)

    async def stop(self) -> None:
        self._done = True
        await self._task
