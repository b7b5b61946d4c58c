"""An asyncio backend's view: async run bodies on the host's loop, a provider connect that closes
every instance while a run generates a tool call, a user's cancel, and the event stream a UI follows.

Run it: python docs/examples/asyncio_host.py
"""

from __future__ import annotations

import asyncio

from run_supervisor import AsyncRunContext, AsyncSubscription, AsyncSupervisor, SupervisorConfig, part_label


async def assistant_turn(ctx: AsyncRunContext) -> None:
    """An async run body: a task on the host's loop; an interrupt cancels it at its next await."""
    async with ctx.step("model"):
        await asyncio.sleep(0)  # the host's async LLM client would stream here
    bash = ctx.tool("bash")
    async with ctx.step("tool_input"):
        await model_done.wait()  # still generating the call's input while the provider connects
    bash.prepared()
    async with ctx.step("tool_exec"):
        bash.running()
    bash.completed()


async def stuck_turn(ctx: AsyncRunContext) -> None:
    await asyncio.Event().wait()  # waits for ever: only a cancel ends it


async def show(events: AsyncSubscription) -> None:
    """What a UI would do with the stream: here, one line per event."""
    async for event in events:  # ends when the shutdown has completed
        print(f"  event {event.seq:>3} {type(event).__struct_config__.tag}")


async def main() -> None:
    async with AsyncSupervisor.start(SupervisorConfig(), directories=["/proj/a"]) as sup:
        printing = asyncio.create_task(show(sup.events()))  # subscribed here, before anything happens

        run = await sup.start_run(assistant_turn, session="s1", directory="/proj/a")
        result = await sup.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
        print(f"close: {result.result.value}, waiting for {', '.join(result.blocking_runs)}")
        model_done.set()
        finished = await run.wait(timeout=5)
        print(f"tool card: {part_label(finished.parts[0])}")

        second = await sup.start_run(stuck_turn, session="s2", directory="/proj/a")
        await second.cancel()
        print(f"second run: {(await second.wait(timeout=5)).reason}")
    await printing  # the stream ended with the shutdown
    print("shut down")


model_done = asyncio.Event()

if __name__ == "__main__":
    asyncio.run(main())
