"""The rooms of a run and its facades import in one direction, never round a loop: the sync context,
then the run actor, then the async body that builds on both, then the link and the two facades.
Imports made only for the type checker count too: a reader of the imports sees them the same."""

from __future__ import annotations

from test_import_layers import MODULES, _imports


def _graph() -> dict[str, set[str]]:
    return {
        module: {target for _, target in _imports(module) if target in MODULES and target != module}
        for module in MODULES
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


RUN_ROOMS = tuple(
    f"run_supervisor.actors.{name}"
    for name in (
        "_context",
        "_run_actor",
        "_async_body",
        "_link",
        "_api",
        "_async_api",
        "_errors",
        "_validate",
    )
)


def test_the_run_context_the_run_actor_and_the_async_body_import_in_one_direction() -> None:
    graph = _graph()
    context, actor, body = RUN_ROOMS[:3]
    assert graph[context] & {actor, body} == set()
    assert body not in graph[actor]


def test_no_room_of_a_run_or_its_facades_stands_in_an_import_circle() -> None:
    assert [group for group in _circles(_graph()) if set(group) & set(RUN_ROOMS)] == []
