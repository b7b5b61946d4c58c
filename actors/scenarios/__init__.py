"""Scenario tooling: read a scenario file, play it against a real supervisor, report what happened.

This subpackage is a *user* of the library: it reaches the supervisor only through the public API
(``run_supervisor`` and ``run_supervisor.protocol``), as any host would; a test forbids it any private
import from the rest of the package. The format is ``docs/scenario-format.md``; the command line is
``run-supervisor scenario`` (``actors/_cli.py``).

- ``_format``: the file format: read, validate (errors name the file and the key), frozen specs typed
  with the protocol's enums.
- ``_bodies``: what a scenario's runs and instances stand for (run bodies, instance hooks with faults).
- ``_play``: the play loop and its timeline (library events merged with the runner's own records).
- ``_report``: the report, msgspec Structs in the contract's JSON shape, and the ``[expect]`` checks.
"""

from run_supervisor.actors.scenarios import _bodies, _format, _play, _report
from run_supervisor.actors.scenarios._bodies import *  # noqa: F403
from run_supervisor.actors.scenarios._format import *  # noqa: F403
from run_supervisor.actors.scenarios._play import *  # noqa: F403
from run_supervisor.actors.scenarios._report import *  # noqa: F403

# The public names are each submodule's own ``__all__``, stated once there.
__all__: list[str] = []
__all__ += _format.__all__
__all__ += _bodies.__all__
__all__ += _play.__all__
__all__ += _report.__all__
