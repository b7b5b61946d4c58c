"""InstanceActor: one per (directory, generation). Owns the disposable caches and the dispose hook.

It knows nothing of runs: closing it can never reach a RunActor. The dispose hook runs on a helper
thread bounded by its budget; a hook that raises or overruns still closes the instance, with an
error the supervisor reports.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar, Protocol

import pykka
from loguru import logger

from run_supervisor.actors._context import _GetCache, _LoadFailed
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import DisposeDone, DisposeInstance

__all__ = ["InstanceActor", "InstanceHooks", "NoInstanceHooks"]


class InstanceHooks(Protocol):
    """What a host plugs in to build and tear down one instance's caches."""

    def load(self, directory: str, generation: int) -> Any:
        """Build the caches (config, provider, watchers...) of a new instance; the result is what
        ``RunContext.instance()`` returns to the runs pinned to it."""

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        """Tear the caches down. Bounded by the dispose budget; may raise."""


class NoInstanceHooks:
    """The default: no caches, nothing to dispose."""

    def load(self, directory: str, generation: int) -> Any:
        return None

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        return None


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class InstanceActor(pykka.ThreadingActor):
    use_daemon_thread: ClassVar[bool] = True

    def __init__(
        self,
        directory: str,
        generation: int,
        hooks: InstanceHooks,
        supervisor: pykka.ActorRef[Any],
        threads: ThreadBook,
    ) -> None:
        super().__init__()
        self._threads = threads
        self.directory = directory
        self.generation = generation
        self._hooks = hooks
        self._supervisor = supervisor
        self._cache: Any = None
        self.load_error: str | None = None
        self.hook_thread: threading.Thread | None = None

    def on_start(self) -> None:
        self._threads.add(threading.current_thread())
        try:
            self._cache = self._hooks.load(self.directory, self.generation)
        except BaseException as exc:  # contained: host code must not stop every actor
            self.load_error = _describe(exc)
            logger.opt(exception=True).warning(
                f"loading {self.directory} generation {self.generation} failed"
            )

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _GetCache):
            if self.load_error is not None:
                return _LoadFailed(
                    f"loading {self.directory} (generation {self.generation}) failed: {self.load_error}"
                )
            return self._cache
        if isinstance(message, DisposeInstance):
            self._dispose(message)
        return None

    def _dispose(self, command: DisposeInstance) -> None:
        outcome: list[str | None] = []

        def hook() -> None:
            try:
                self._hooks.dispose(self.directory, self.generation, self._cache)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(_describe(exc))

        self.hook_thread = threading.Thread(
            target=hook, name=f"run-supervisor-dispose-{self.generation}", daemon=True
        )
        self._threads.add(self.hook_thread)
        self.hook_thread.start()
        if not command.report:
            self.stop()
            return
        self.hook_thread.join(timeout=command.budget_ms / 1000.0)
        error = outcome[0] if outcome else f"the dispose hook overran its {command.budget_ms} ms budget"
        try:
            self._supervisor.tell(
                DisposeDone(directory=self.directory, generation=self.generation, error=error)
            )
        except pykka.ActorDeadError:
            pass
        self.stop()
