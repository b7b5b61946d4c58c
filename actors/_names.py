"""A package's public names, written once: the ``from ... import Name as Name`` lines of its
``if TYPE_CHECKING or not _HOMES:`` block.

Type checkers read those imports. At run time they are read from the package's source and not run:
each name is imported from its home on first use (the package's ``__getattr__``), so importing the
package loads nothing else (``import run_supervisor`` starts no pykka; ``run-supervisor serve`` does
not load the asyncio facade, the shards or the scenario tooling). Where the source cannot be read (a
frozen app that ships bytecode only), ``homes`` is empty, the block runs, and the names are the ones it
bound.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, MutableMapping
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["homes", "lazy"]

_BLOCK = "TYPE_CHECKING or not _HOMES"


def homes(file: str) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING or not _HOMES:`` block of the module at ``file`` imports, with the
    module it comes from, in the block's order (``from package import *``: each name of that package's
    ``__all__``, a package as lazy as this one); empty when the source cannot be read."""
    if not file.endswith(".py"):  # bytecode only (a frozen app, a .pyc install): no source to read
        return {}
    try:
        source = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    found: dict[str, str] = {}
    for block in ast.parse(source).body:
        if isinstance(block, ast.If) and ast.unparse(block.test) == _BLOCK:
            for statement in block.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        if alias.name == "*":  # every name of that (lazy) package, from it
                            found |= dict.fromkeys(import_module(statement.module).__all__, statement.module)
                        else:
                            found[alias.asname or alias.name] = statement.module
    return found


def lazy(
    package: str, found: dict[str, str], namespace: MutableMapping[str, Any], before: set[str]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__all__``, ``__getattr__`` and ``__dir__``. ``found`` is what ``homes`` read
    (empty: the block ran, and its names are those ``namespace`` gained since it held ``before``, but
    the submodules the imports bound)."""
    if not found:
        found = {
            name: package
            for name, value in namespace.items()
            if name not in before and not name.startswith("_") and not isinstance(value, ModuleType)
        }

    def getattr_(name: str) -> Any:
        try:
            home = found[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = __import__(home, fromlist=[name])
        value = getattr(module, name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *found})

    return list(found), getattr_, dir_
