"""The cyclic garbage collector, kept from stalling Play.

A full collection walks every object the collector tracks, holding the interpreter
meanwhile, so both the GUI thread and the lab's thread stand still. Two things keep
those walks short or out of the way:

- :func:`set_aside_imports`: the objects torch, Qt and pyqtgraph leave at import are
  taken out of the collector's view once, so no collection walks them.
- :func:`hold_full_collections`: while Play runs, full collections wait. A long Play keeps
  some twenty thousand records per run (a hundred thousand objects or so, all of them
  freed by reference counting, none in a cycle), and the collector walked them all every
  few seconds: tens of milliseconds, several frames, each time. Play makes next to no
  cyclic garbage, so nothing builds up while they wait; paused, the collector runs as
  it always does.

Neither imports torch: the window calls them before torch is loaded.
"""

from __future__ import annotations

import functools
import gc

# A threshold for full collections no Play reaches: the collector counts collections of the
# middle generation against it, some hundreds a second at full speed.
HELD = 2**30

_holds = 0  # callers holding full collections back now
_threshold = gc.get_threshold()[2]


@functools.cache  # once a process: what is alive at the first call is what the imports left
def set_aside_imports() -> None:
    """Take every object alive now out of the cyclic garbage collector's view (``gc.freeze``).

    torch, Qt and pyqtgraph leave a few hundred thousand objects that live as long as the
    process, and every full collection walked them all: a quarter of a second in the window,
    a stall in the middle of Play, and a twentieth of recording's time in a long headless run.
    Called once the modules are imported, collections walk only what was made since. An object
    set aside is still freed when nothing refers to it, only not as part of a reference cycle.
    """
    gc.freeze()


def hold_full_collections(hold: bool) -> None:
    """Postpone the collector's full collections (``hold``), or let them run again.

    Holds nest: full collections run again once every hold has been let go. Younger
    generations are collected as usual throughout, so short-lived cycles still go.
    """
    global _holds, _threshold
    young = gc.get_threshold()[:2]
    if hold:
        if _holds == 0:
            _threshold = gc.get_threshold()[2]
            gc.set_threshold(*young, HELD)
        _holds += 1
    elif _holds > 0:
        _holds -= 1
        if _holds == 0:
            gc.set_threshold(*young, _threshold)
