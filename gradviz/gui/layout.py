"""What the views are and where they go: one description for the window, presentation mode and exports.

The registry names every view once (its class, title and the smallest size at
which it stays readable); the layout says how the shown views share the space:
two columns, code and the ``.grad`` inspector on the left, the surfaces and the
timeline on the right, the 3-D surface beside the 2-D one. The main window
builds its splitters from it and an export frame its boxes, so the two cannot
drift apart. Nothing here imports Qt until a view is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradviz.engine.lesson import Lesson


@dataclass(frozen=True)
class ViewSpec:
    """One view: its name in menus, settings and ``--views``, its class and its readable minimum.

    Attributes
    ----------
    name:
        ``code``, ``grads``, ``surface``, ``timeline``, ``surface3d`` or ``graph``.
    title:
        What menus call it.
    target:
        ``module:Class`` of the widget, imported only when one is made.
    min_size:
        Width and height in pixels below which it stops being readable at the normal type
        size (legends cover the plot, rows collide, the table loses columns).
    default:
        Whether the window and exports show it unless told otherwise (the 3-D surface
        needs OpenGL, so it is asked for).
    """

    name: str
    title: str
    target: str
    min_size: tuple[int, int]
    default: bool = True

    def widget_class(self) -> type[Any]:
        """The view's widget class (importing Qt, and for ``surface3d`` nothing of OpenGL yet)."""
        module, cls = self.target.split(":")
        return getattr(importlib.import_module(module), cls)


VIEWS: dict[str, ViewSpec] = {
    spec.name: spec
    for spec in (
        ViewSpec("code", "Code", "gradviz.gui.views.code:CodeView", (260, 170)),
        ViewSpec("surface", "Loss surface", "gradviz.gui.views.surface:SurfaceView", (360, 260)),
        ViewSpec("grads", ".grad inspector", "gradviz.gui.views.grads:GradsView", (330, 150)),
        ViewSpec("timeline", "Timeline", "gradviz.gui.views.timeline:TimelineView", (320, 240)),
        ViewSpec(
            "surface3d", "3-D surface", "gradviz.gui.views.surface3d:Surface3DView", (300, 260), default=False
        ),
        # Capturing the graph costs every op a little, so it is shown only when asked for.
        ViewSpec("graph", "Autograd graph", "gradviz.gui.views.graph:GraphView", (340, 260), default=False),
    )
}
DEFAULT_VIEWS: tuple[str, ...] = tuple(name for name, spec in VIEWS.items() if spec.default)
PRESENTATION_VIEWS: tuple[str, ...] = ("code", "surface", "grads")
# The views the View menu and presentation mode list (the 3-D surface has its own action).
MENU_VIEWS: tuple[str, ...] = tuple(name for name in VIEWS if name != "surface3d")
# Presentation type is larger, but plots need not grow with it as much.
PRESENTATION_MIN_SCALE = 1.3
# The least of the window's width the lesson panel takes beside the views, the most in presentation
# mode (large type, the room reads the questions) and the most in the window (the views matter more).
LESSON_SHARE = (0.25, 0.5, 0.36)


@dataclass(frozen=True)
class Cell:
    """Views side by side in one row of a column, and the row's share of the column's height."""

    views: tuple[str, ...]
    stretch: int


@dataclass(frozen=True)
class Column:
    """Rows of views, top to bottom, the column's share of the width, and its name in settings."""

    cells: tuple[Cell, ...]
    stretch: int
    name: str = ""

    @property
    def views(self) -> tuple[str, ...]:
        return tuple(v for cell in self.cells for v in cell.views)


@dataclass(frozen=True)
class Layout:
    """Columns of cells; :meth:`arrange` keeps the part that holds the views shown."""

    columns: tuple[Column, ...]

    def arrange(self, shown: Iterable[str]) -> tuple[Column, ...]:
        """The columns, rows and views that hold a view of ``shown``, in the layout's order.

        A lone 3-D surface takes the 2-D surface's place.
        """
        keep = set(shown)
        out = []
        for column in self.columns:
            cells = tuple(
                Cell(tuple(v for v in cell.views if v in keep), cell.stretch)
                for cell in column.cells
                if any(v in keep for v in cell.views)
            )
            if cells:
                out.append(Column(cells, column.stretch, column.name))
        return tuple(out)

    def minimum(self, shown: Iterable[str], scale: float = 1.0) -> tuple[int, int]:
        """The smallest width and height (without spacing) that keeps every shown view readable."""
        width = height = 0
        for column in self.arrange(shown):
            w = max(sum(VIEWS[v].min_size[0] for v in cell.views) for cell in column.cells)
            h = sum(max(VIEWS[v].min_size[1] for v in cell.views) for cell in column.cells)
            width += w
            height = max(height, h)
        return int(width * scale), int(height * scale)

    def widths(self, shown: Iterable[str], total: int) -> list[int]:
        """Each column's width in ``total`` pixels by its share, 0 for one that holds no view of ``shown``."""
        keep = set(shown)
        stretch = [c.stretch if keep & set(c.views) else 0 for c in self.columns]
        sizes = [total * s // max(sum(stretch), 1) for s in stretch]
        last = max((i for i, s in enumerate(stretch) if s), default=0)
        sizes[last] += total - sum(sizes)  # what rounding left over
        return sizes


WINDOW_LAYOUT = Layout(
    (
        Column((Cell(("code",), 3), Cell(("grads",), 2)), 5, "left"),
        Column((Cell(("surface", "surface3d"), 3), Cell(("timeline",), 2)), 6, "right"),
        # The graph's layers go down from the loss to the leaves: the window's full height is its room.
        Column((Cell(("graph",), 1),), 3, "graph"),
    )
)


def share(total: int, least: Sequence[int], full: Sequence[int]) -> list[int]:
    """Sizes for views stacked (or side by side) in ``total`` pixels, giving each the room its content needs.

    Where every view's whole content fits (``full``), each gets just that and the room
    left goes to the first: a view shows no more empty space than it must. Otherwise each
    gets the least that keeps its point in view (``least``: the loop's lines, the leading
    rows) and what is left is shared in proportion to what each still lacks; where even
    that does not fit, the others keep their least and the first (the code, which scrolls to
    its current line) takes what is left.
    """
    full = [max(f, n) for f, n in zip(full, least, strict=True)]
    if not full:
        return []
    if sum(full) <= total:
        return [full[0] + total - sum(full), *full[1:]]
    if sum(least) <= total:
        spare, lack = total - sum(least), [f - n for f, n in zip(full, least, strict=True)]
        sizes = [n + spare * gap // max(sum(lack), 1) for n, gap in zip(least, lack, strict=True)]
    else:
        rest = list(least[1:])
        while rest and sum(rest) > total:
            rest[-1] = max(total - sum(rest[:-1]), 0)
        sizes = [0, *rest]
    sizes[0] += total - sum(sizes)  # what rounding left over
    return sizes


SURFACES = ("surface", "surface3d")


# The views that give way first when a lesson panel needs the room beside them.
GIVE_WAY = ("surface3d", "graph", "timeline", "surface")


def beside_lesson(shown: Iterable[str], room: int, scale: float = 1.0) -> tuple[str, ...]:
    """The views of ``shown`` that stay readable in the ``room`` pixels a lesson panel leaves them.

    The surfaces, the graph and the timeline give way, in :data:`GIVE_WAY`'s order, until
    the rest fit; the code and the ``.grad`` inspector, where the questions' evidence is, stay.
    """
    keep = list(shown)
    for name in GIVE_WAY:
        if WINDOW_LAYOUT.minimum(keep, scale)[0] <= room:
            break
        if name in keep and len(keep) > 1:
            keep.remove(name)
    return tuple(keep)


def views_for(lesson: Lesson | None, views: Iterable[str]) -> tuple[str, ...]:
    """``views`` less the surfaces when the scenario's lesson leaves them out (they teach nothing there)."""
    if lesson is not None and lesson.surface == "none":
        return tuple(v for v in views if v not in SURFACES)
    return tuple(views)


def parse_views(text: str) -> tuple[str, ...]:
    """Comma-separated view names, in the order given, without repeats; UserError for an unknown one."""
    from gradviz.engine.errors import UserError, quoted

    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"--views needs at least one of {', '.join(VIEWS)}.")
    unknown = [n for n in names if n not in VIEWS]
    if unknown:
        raise UserError(f"--views: unknown view {quoted(unknown[0])}; choose from {', '.join(VIEWS)}.")
    return tuple(dict.fromkeys(names))


def position_text(tick: int, ticks_per_iteration: int, iterations: int | None = None) -> str:
    """Where the moment after ``tick`` is in the loop: "iteration 3 of 40 · op 9", or "start".

    The window's status bar gives the scenario's length; an export frame's counter leaves it out.
    """
    if tick < 0:
        return "before the first op" if iterations is not None else "start"
    iteration = tick // ticks_per_iteration + 1
    of = f" of {iterations}" if iterations is not None else ""
    return f"iteration {iteration}{of} · op {tick + 1}"
