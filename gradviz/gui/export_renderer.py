"""The lab behind an export: stepped, given its plane, and drawn by the views that fit the size.

A :class:`FrameRenderer` owns a lab driven through the window's own controller
and worker classes (on the worker threads when ``threaded``, as the window's
Export dialog runs it, or inline for the command line) and an
:class:`~gradviz.gui.export_frame.ExportFrame` of the chosen views. Its work
before the first frame is a generator (:meth:`FrameRenderer.prepare`) that
yields while the worker threads step the lab and compute the plane, so a
window keeps handling events.

Models that are not two-parameter get their surface over a plane through
weight space, computed once before the first frame and kept for the whole
animation. Default views give way to a small size, in :func:`keep_order`'s
order, and :attr:`FrameRenderer.notes` says which were kept.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from gradviz.gui.export_frame import ExportFrame, FrameStyle, run_inline
from gradviz.gui.layout import SURFACES, position_text, views_for
from gradviz.gui.window_history import LabInfo, Moment, PlaneRequest, PlaneSurface
from gradviz.gui.worker import plane_kinds

if TYPE_CHECKING:
    from gradviz.engine.lesson import Lesson
    from gradviz.engine.quiz import Reveal
    from gradviz.engine.scenario import Scenario
    from gradviz.gui.controller import Controller

# The plane of a model that is not two-parameter: the principal components of the exported path.
# Known in advance here (unlike in the window), they hold the path's largest moves, so it lies
# nearly in the plane (small residuals) and visibly descends; random directions through the start
# would show little more than a dot. The window's own default stands in when PCA cannot be made.
EXPORT_PLANE = "pca"
FALLBACK_PLANE = "random"
# How many moments an export draws beforehand to learn the tallest text and rows it will show.
RESERVE_SAMPLES = 400
# Which default views a size that cannot hold them all keeps longest.
KEEP_FIRST = ("surface", "code", "grads", "timeline")
KEEP_FIRST_GRADS = ("grads", "surface", "code", "timeline")
# Quantities only the .grad inspector shows (its lr and memory readouts, the optimizer's state):
# a lesson that leads with one is about the inspector.
INSPECTOR_ONLY = ("lr", "memory", "state")
# A lesson whose questions read what autograd holds or walks (the bytes saved for backward, the
# nodes a backward walked) shows them over time in the timeline's saved and walked rows, and the
# graph walked in the autograd graph: they are its evidence, kept before the code and the inspector.
KEEP_FIRST_AUTOGRAD = ("timeline", "graph", "code", "grads", "surface")


def with_evidence(views: Sequence[str], lesson: Lesson | None) -> tuple[str, ...]:
    """``views`` and the autograd graph, where they hold the timeline (whose rows show what autograd
    saves and walks) and the lesson asks how many nodes a backward walks and leaves the surface
    out: the graph then takes the surface's place."""
    from gradviz.engine.footprint import lesson_reads

    if "timeline" not in views:
        return tuple(views)
    if lesson is not None and lesson.surface == "none" and "nodes" in lesson_reads(lesson):
        return tuple(dict.fromkeys((*views, "graph")))
    return tuple(views)


def keep_order(views: Sequence[str], lesson: Lesson | None, evidence: bool = True) -> tuple[str, ...]:
    """``views`` from the one kept longest to the one left out first when a frame is too small.

    The surface and the code stay longest, then the ``.grad`` inspector, then the
    timeline; a lesson that leads with ``.grad`` quantities of named parameters,
    or with what only the inspector shows (lr, memory, the optimizer's state), is
    about the inspector: it stays longest. A lesson that asks what autograd saves
    or walks keeps its evidence longest where the timeline is among ``views`` (and
    ``evidence``; presentation exports keep the presenter's order): the timeline,
    then the graph.
    """
    from gradviz.engine.footprint import lesson_reads

    leads_grads = lesson is not None and (
        (bool(lesson.show) and bool(lesson.params)) or any(q in INSPECTOR_ONLY for q in lesson.show)
    )
    order: tuple[str, ...] = KEEP_FIRST_GRADS if leads_grads else KEEP_FIRST
    if evidence and lesson_reads(lesson) and "timeline" in views:
        order = KEEP_FIRST_AUTOGRAD
    return (*(v for v in order if v in views), *(v for v in views if v not in order))


def fit_candidates(
    views: Sequence[str], lesson: Lesson | None, evidence: bool = True
) -> list[tuple[str, ...]]:
    """The view sets a default export tries, in order: ``views`` less what the lesson leaves out
    (with the autograd graph where it holds the lesson's evidence, :func:`with_evidence`), then
    fewer, each set before any that lacks a view it keeps longer (see :func:`keep_order`).

    With the usual order that is every view; no timeline; no ``.grad`` inspector (a timeline
    may still fit where the inspector does not); neither; and only then sets without the code,
    and last without the surface. Each set keeps the layout's order.
    """
    shown = views_for(lesson, views) or tuple(views)
    if evidence:
        shown = with_evidence(shown, lesson)
    ranked = keep_order(shown, lesson, evidence)
    n = len(ranked)
    out = []
    # Counting down in binary over the ranked views: the first view is the highest bit.
    for mask in range(2**n - 1, 0, -1):
        kept = {v for i, v in enumerate(ranked) if mask >> (n - 1 - i) & 1}
        out.append(tuple(v for v in shown if v in kept))
    return out


def spoken_list(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class FrameRenderer:
    """A scenario's lab, stepped for an export, and the frame that draws it.

    Use it as a generator of work: ``yield from renderer.open()``, then
    ``yield from renderer.prepare(ticks)``; each yield is a point where a window
    may handle events while the worker threads step the lab or compute the plane.
    Then :meth:`show` and :meth:`render` draw one moment at a time.

    Parameters
    ----------
    scenario:
        A built-in name, a scenario file, or a :class:`~gradviz.engine.scenario.Scenario`.
    style:
        How the frames look. With ``style.fit`` the views that the size cannot
        hold readably are left out, and :attr:`notes` says which were kept.
    threaded:
        Step the lab and compute the plane on the controller's worker threads (a
        window's export) instead of inline (the command line, which has no event loop).

    Raises
    ------
    UserError
        From :meth:`open` and :meth:`prepare`: when the scenario cannot be built or
        the size is too small for the views.
    """

    def __init__(self, scenario: str | Scenario, style: FrameStyle, *, threaded: bool = False) -> None:
        from gradviz.gui.controller import Controller

        self.app = QApplication.instance()
        if not isinstance(self.app, QApplication):
            raise RuntimeError("FrameRenderer needs a QApplication; use gradviz.gui.render.application()")
        self.source = scenario
        self.style = style
        self.notes: list[str] = []
        self._errors: list[str] = []
        self.controller: Controller = Controller(threaded=threaded)
        self.controller.failed.connect(self._errors.append)
        self.controller.plane_ready.connect(self._on_plane)
        self.controller.plane_failed.connect(self._on_plane_failed)
        self.controller.revealed.connect(self._on_revealed)
        self.controller.graph_replayed.connect(self._on_graph_replayed)
        self.controller.capture_graphs("graph" in style.views)
        self._plane_error = ""
        self._plane: PlaneSurface | None = None
        self._reveals: dict[int, tuple[Reveal, ...]] = {}
        self._prepared = False
        self._candidates: list[tuple[str, ...]] = [style.views]
        self._choice = 0

    # ------------------------------------------------------------ the lab
    def open(self) -> Generator[None, None, None]:
        """Build the lab (on the lab thread when threaded) and the frame of the views asked for."""
        from gradviz.engine.errors import UserError

        self.controller.open(self.source)
        yield from self._idle()
        if self.controller.info is None:
            self.close()
            opened = f"The scenario {self.source!r} could not be opened."
            raise UserError(self._errors[-1] if self._errors else opened)
        self.info: LabInfo = self.controller.info
        lesson = self.info.scenario.lesson
        if self.style.fit:
            self._candidates = fit_candidates(self.style.views, lesson, not self.style.presentation)
            if "graph" in self._candidates[0] and "graph" not in self.style.views:
                self.controller.capture_graphs(True)  # from the first op, none performed yet
        # Whether the size holds the views is known once every frame's content is: see prepare().
        self.frame = self._build(self._candidates[0])

    def _idle(self) -> Generator[None, None, None]:
        """Wait for the lab thread's answer (nothing to wait for inline)."""
        while self.controller.busy:
            yield

    def step_to(self, tick: int) -> Generator[None, None, None]:
        """Perform ops, an iteration at a time, until the op at ``tick`` has run or every run stopped."""
        c = self.controller
        yield from self._idle()
        while c.cursor < tick:
            before = c.cursor
            if not c.next_iteration():
                return
            yield  # a safe point each iteration, even inline: a Ctrl+C does not wait for the whole run
            yield from self._idle()
            if c.cursor == before:  # the scenario's last op: nothing more to perform
                return

    @property
    def ticks_per_iteration(self) -> int:
        return self.info.ticks_per_iteration

    @property
    def last_tick(self) -> int:
        """The last op performed (-1 before the first)."""
        history = self.controller.history
        return -1 if history is None else history.last_tick

    def reveals(self, stop: int) -> Generator[None, None, None]:
        """Compute the reveals of lesson stop ``stop`` (no answers given) from the lab's records."""
        self._reveals.pop(stop, None)
        self.controller.request_reveal(stop, [])
        while stop not in self._reveals and not self._errors:
            yield
        if stop not in self._reveals:
            from gradviz.engine.errors import UserError

            raise UserError(self._errors[-1])

    def revealed(self, stop: int) -> tuple[Reveal, ...]:
        """The reveals :meth:`reveals` computed."""
        return self._reveals[stop]

    def _on_revealed(self, result: tuple[int, tuple[Reveal, ...]]) -> None:
        index, reveals = result
        self._reveals[index] = reveals

    # ------------------------------------------------------------ views
    def _build(self, views: tuple[str, ...], size: tuple[int, int] | None = None) -> ExportFrame:
        self._frame_prepared = False
        style = replace(self.style, views=views, size=size or self.style.size)
        frame = ExportFrame(style)
        frame.resize(*style.size)
        frame.set_lab(self.info)
        graph = frame.views.get("graph")
        if graph is not None:  # the window keeps the graphs of its last ops only: the lab walks the others
            graph.on_replay_request(self.controller.request_graph)
        return frame

    def _on_graph_replayed(self, got: tuple[str, int, Any]) -> None:
        graph = self.frame.views.get("graph")
        if graph is not None:
            graph.set_replayed(*got)

    def _discard(self, frame: ExportFrame) -> None:
        frame.close()
        frame.deleteLater()
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)

    def _choose(self, ticks: Sequence[int]) -> Generator[None, None, None]:
        """Keep the first view set that fits the size, each prepared for ``ticks``; UserError if none does."""
        from gradviz.engine.errors import UserError

        fit = len(self._candidates) > 1
        for i, views in enumerate(self._candidates):
            if i != self._choice:
                self._discard(self.frame)
                self.frame = self._build(views)
                self._choice = i
            # A set that does not fit with the lab's first texts will not with every frame's (they
            # only add lines and rows): only the others are drawn through and measured again.
            if fit and not self.frame.fits():
                continue
            try:
                yield from self._prepare_frame(ticks)
            except UserError:
                if not fit:
                    raise
                continue  # only surfaces, and no plane to draw them over
            if self.frame.fits():
                self._say_kept()
                return
            yield  # between two view sets: the window may handle its events
        # Nothing fits: say what the views asked for need together, or what the view kept longest needs.
        views = self._candidates[0]
        if fit:
            views = (keep_order(views, self.info.scenario.lesson, not self.style.presentation)[0],)
        if self.frame.frame_style.views != views or not self._frame_prepared:
            self._discard(self.frame)
            self.frame = self._build(views)
            yield from self._prepare_frame(ticks)
        small = self.frame.too_small() or self.style.size
        # Made afresh at that size, as the export asked for it would be: it holds, or says what more.
        for _ in range(3):
            self._discard(self.frame)
            self.frame = self._build(views, small)
            yield from self._prepare_frame(ticks)
            more = self.frame.too_small()
            if more is None:
                break
            small = more
        self.close()
        raise self._too_small(views, small)

    def _too_small(self, views: tuple[str, ...], need: tuple[int, int]) -> Exception:
        from gradviz.engine.errors import UserError

        w, h = self.style.size
        fewer = " or fewer views" if len(views) > 1 else ""
        caption = " with a caption" if self.style.caption else ""
        return UserError(
            f"{w}x{h} is too small to draw {', '.join(views)}{caption} "
            f"readably: it needs at least {need[0]}x{need[1]}; choose a larger size{fewer}."
        )

    def _say_kept(self) -> None:
        kept, everything = self._candidates[self._choice], self._candidates[0]
        left = [v for v in everything if v not in kept]
        w, h = self.style.size
        ranked = keep_order(kept, self.info.scenario.lesson, not self.style.presentation)
        self.notes = (
            [
                f"{w}x{h} holds {spoken_list(ranked)} readably; left out {', '.join(left)} "
                "(ask for them with --views and a larger --size)."
            ]
            if left
            else []
        )

    # ------------------------------------------------------- preparing
    def prepare(self, ticks: Sequence[int]) -> Generator[None, None, None]:
        """Get every frame of an export showing ``ticks`` ready, before the first is rendered.

        The runs are stepped to the last tick, so that a model that is not
        two-parameter gets its plane from the whole exported path (the principal
        components), the axes take the ranges that hold all of it, and the
        labels and rows the room of their tallest content; the cursor then goes
        back to the start. A frame that no longer fits its size then gives up a
        view (``style.fit``) or is refused.

        Raises
        ------
        UserError
            When no plane could be made and the surfaces are the only views, or
            the size is too small for the views.
        """
        if self._prepared or not ticks:
            return
        self._prepared = True
        yield from self.step_to(max(ticks))
        frame = self.frame
        if frame.wants_plane:
            self.controller.request_plane(PlaneRequest(self._plane_kind()), fallback=FALLBACK_PLANE)
            yield from self._plane_done()
            if self._plane is None and len(self._candidates) > 1:
                # No plane could be made: the default views go on without the surfaces.
                others = [tuple(v for v in c if v not in SURFACES) for c in self._candidates]
                self._candidates = list(dict.fromkeys(c for c in others if c)) or self._candidates
        yield from self._choose(ticks)
        self.controller.seek(-1)

    def _plane_kind(self) -> str:
        """The plane to draw: the one the lesson names (first among the lab's kinds), else the path's own."""
        if self.frame.state.mode == "curve":
            return "curve"
        lesson = self.info.scenario.lesson
        kinds = plane_kinds(self.info)
        if lesson is not None and lesson.surface != "auto" and kinds:
            return kinds[0][0]
        return EXPORT_PLANE

    def _plane_done(self) -> Generator[None, None, None]:
        while self.controller.plane_pending:
            yield

    def _prepare_frame(self, ticks: Sequence[int]) -> Generator[None, None, None]:
        self._frame_prepared = True
        frame = self.frame
        if frame.state.mode in ("plane", "curve"):
            if self._plane is None:
                frame.drop_surface(self.info, self._plane_error or "no plane could be made")
            else:
                if frame.state.plane is None:
                    frame.set_plane_surface(self._plane)
                # Only the same plane over a wider range: the plane itself stays for the whole animation.
                frame.on_plane_request(self._widen)
        where = self.info.position or (lambda tick: position_text(tick, self.ticks_per_iteration))
        frame.reserve_counter(where(ticks[-1]))
        history = self.controller.history
        assert history is not None
        end = self.controller.cursor
        shown = sorted({history.snap(t) for t in ticks if t <= end} or {-1})
        if len(shown) > RESERVE_SAMPLES:
            step = len(shown) / RESERVE_SAMPLES
            shown = [shown[int(i * step)] for i in range(RESERVE_SAMPLES)] + [shown[-1]]
        moments = [Moment(self.info, history, t, hide_future=True) for t in shown]
        yield from frame.prepare(moments, moments[-1])
        # A wider plane asked for on the way (on the worker threads) is in place before the first frame.
        yield from self._plane_done()

    def _widen(self, request: PlaneRequest) -> None:
        if request.plane is not None:
            self.controller.request_plane(request, fallback=FALLBACK_PLANE)

    def _on_plane(self, surface: PlaneSurface) -> None:
        # The inline controller sends a coarse grid, then the full one: a frame only ever shows the full one.
        if surface.final:
            # The worker's note on a fallback plane ("... meanwhile") is for the window, which may
            # recompute; here the plane is final and the caption already names its kind.
            self._plane = replace(surface, note="")
            self.frame.set_plane_surface(self._plane)

    def _on_plane_failed(self, message: str) -> None:
        self._plane_error = message

    def moment(self) -> Moment:
        """The moment a frame shows now: the cursor's, with nothing after it."""
        moment = self.controller.moment()
        assert moment is not None
        return replace(moment, hide_future=True)

    def show(self, tick: int) -> Generator[None, None, None]:
        """Move to the moment after the op at (or before) ``tick``, from the ops already performed."""
        c = self.controller
        c.seek(tick)
        history = c.history
        assert history is not None
        # A large model keeps full records for few ops: the lab thread rebuilds the others.
        while history.missing(c.cursor) and not self._errors:
            yield
        # And the lab walks again a graph the window keeps no longer.
        graph: Any = self.frame.shown_views().get("graph")
        while graph is not None and graph.wants_graph(self.moment()) and not self._errors:
            yield

    def render(self, card: str = "", caption: str | None = None, reads: Iterable[str] = ()) -> np.ndarray:
        """The moment as an RGB frame: a lesson ``card`` clear of the views it ``reads``, a caption."""
        self.frame.draw(self.moment(), caption)
        self.frame.show_card(card, reads)
        return self.frame.render_rgb()

    def frames(self, ticks: Sequence[int]) -> Iterator[np.ndarray]:
        """Prepare for ``ticks``, then render the moment of each (inline renderers: tests, benches)."""
        run_inline(self.prepare(ticks))
        for tick in ticks:
            run_inline(self.show(tick))
            yield self.render()

    def close(self) -> None:
        """Release the frame's widgets and the lab (again: nothing)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if hasattr(self, "controller"):
            self.controller.shutdown()
        if hasattr(self, "frame"):
            self.frame.close()
            self.frame.deleteLater()
        # Delete the views now rather than at the next turn of an event loop the command line
        # never runs; unlike processEvents this cannot re-enter a window's own handlers.
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)

    def __enter__(self) -> FrameRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
