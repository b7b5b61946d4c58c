"""A desktop backend's view: a provider connect while a run is generating a tool call.

Run it: python docs/examples/quickstart.py
"""

from __future__ import annotations

from typing import Any

from run_supervisor import CloseResult, Gate, Outcome, RunContext, Supervisor, SupervisorConfig, part_label


class ProjectCaches:
    """What the host keeps per directory: config, provider clients, watchers..."""

    def __init__(self) -> None:
        self.disposed: list[str] = []

    def load(self, directory: str, generation: int) -> Any:
        return {"provider": f"client for {directory} (generation {generation})"}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        self.disposed.append(f"{directory}#{generation}")  # runs on the instance's own thread


model_is_writing_the_call = Gate("tool input")


def assistant_turn(ctx: RunContext) -> None:
    """A run body: runs on its own thread; every wait wakes on cancellation."""
    provider = ctx.instance()["provider"]  # the instance this run is pinned to
    with ctx.step("model"):
        pass
    bash = ctx.tool("bash")  # the model starts generating a tool call
    with ctx.step("tool_input"):
        ctx.wait(model_is_writing_the_call)
    bash.prepared()  # the call is materialized
    with ctx.step("tool_exec"):
        bash.running()
        print(f"bash runs with {provider}")
    bash.completed()


caches = ProjectCaches()
with Supervisor.start(SupervisorConfig(), hooks=caches, directories=["/proj/a", "/proj/b"]) as sup:
    events = sup.subscribe()
    run = sup.start_run(assistant_turn, session="s1", directory="/proj/a")

    # settings.provider.connect -> POST /global/dispose -> a structured close, not a boolean:
    result = sup.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
    assert result.result is CloseResult.DEFERRED
    print(
        f"{result.action_id}: closed {result.completed_directories} now, "
        f"{result.pending_directories} after {result.blocking_runs}"
    )

    model_is_writing_the_call.open()
    finished = run.wait(timeout=5)
    assert finished.outcome is Outcome.COMPLETED
    print(f"tool card: {part_label(finished.parts[0])}")

    # The user cancels the next run: it is interrupted with an explicit reason.
    second = sup.start_run(lambda ctx: ctx.wait(Gate("never")), session="s1", directory="/proj/a")
    second.cancel()
    print(f"second run: {second.wait(timeout=5).reason}")
# Leaving the block shuts down: every actor and thread stops within the grace deadline.
print(f"disposed: {', '.join(caches.disposed)}")
print(f"events seen: {len(events.drain())}")
