"""Export frames that belong on a slide: views that fit their size, axes that hold still, no future."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QLabel

from gradviz.engine.errors import UserError
from gradviz.engine.lesson import Lesson
from gradviz.export.plan import FramePlan, plan_frames
from gradviz.gui.export_frame import ExportFrame, FrameStyle
from gradviz.gui.export_renderer import FrameRenderer, fit_candidates, keep_order, run_inline
from gradviz.gui.layout import DEFAULT_VIEWS

FOUR = ("surface", "grads", "code", "timeline")


def renderer(scenario: str, size: tuple[int, int], views: tuple[str, ...] = FOUR, **style: object):
    from gradviz.gui.display import frames_application

    frames_application(views, "light", 10.0)
    r = FrameRenderer(scenario, FrameStyle(size, views, **style))  # type: ignore[arg-type]
    run_inline(r.open())
    return r


def plan_of(r: FrameRenderer, **frames: object) -> FramePlan:
    return plan_frames(
        r.ticks_per_iteration,
        default_iterations=r.info.scenario.iterations,
        **frames,  # type: ignore[arg-type]
    )


def rendered(r: FrameRenderer, plan: FramePlan) -> Iterator[np.ndarray]:
    """Each frame of ``plan`` as it is rendered (the views then show that frame's moment)."""
    yield from r.frames(plan.ticks())


def boxes(frame: ExportFrame) -> dict[str, QRect]:
    return {key: QRect(v.mapTo(frame, QPoint(0, 0)), v.size()) for key, v in frame.shown_views().items()}


def needed(scenario: str, views: tuple[str, ...] = FOUR, **frames: object) -> tuple[int, int]:
    """The least size the refusal of a tiny frame names, for the frames of ``frames``."""
    with pytest.raises(UserError) as caught:
        r = renderer(scenario, (320, 240), views)
        run_inline(r.prepare(plan_of(r, **frames).ticks()))
    found = re.search(r"it needs at least (\d+)x(\d+)", str(caught.value))
    assert found, str(caught.value)
    return int(found[1]), int(found[2])


# --- which views a default export keeps ------------------------------------------------------------


def test_the_surface_and_the_code_are_kept_longest_or_the_inspector_when_the_lesson_leads_with_it() -> None:
    assert keep_order(DEFAULT_VIEWS, None) == ("surface", "code", "grads", "timeline")
    assert keep_order(DEFAULT_VIEWS, Lesson(show=("grad",))) == ("surface", "code", "grads", "timeline")
    leads = Lesson(show=("grad", "state"), params=("offset",))
    assert keep_order(DEFAULT_VIEWS, leads) == ("grads", "surface", "code", "timeline")
    sets = fit_candidates(DEFAULT_VIEWS, None)
    # The timeline goes first, then the inspector (a timeline may still fit where it does not).
    assert sets[:4] == [
        ("code", "surface", "grads", "timeline"),
        ("code", "surface", "grads"),
        ("code", "surface", "timeline"),
        ("code", "surface"),
    ]
    assert sets.index(("surface",)) < sets.index(("code",)) and len(sets) == 15
    # A lesson about what only the inspector shows (lr, memory) keeps it longest too.
    assert keep_order(DEFAULT_VIEWS, Lesson(show=("lr", "memory")))[0] == "grads"
    # A lesson without a surface leaves it out of every set.
    assert all("surface" not in s for s in fit_candidates(DEFAULT_VIEWS, Lesson(surface="none")))


def test_a_default_export_leaves_out_what_its_size_cannot_hold_and_says_what_it_kept(qapp) -> None:
    with renderer("forgot-zero-grad", (640, 480), DEFAULT_VIEWS, fit=True) as r:
        run_inline(r.prepare(plan_of(r, ops=8).ticks()))
        assert tuple(r.frame.shown_views()) == ("code", "surface")
        assert not r.frame.problems()
        assert r.notes == [
            "640x480 holds surface and code readably; left out grads, timeline "
            "(ask for them with --views and a larger --size)."
        ]
    with renderer("forgot-zero-grad", (1280, 720), DEFAULT_VIEWS, fit=True) as r:
        run_inline(r.prepare(plan_of(r, ops=8).ticks()))
        assert tuple(r.frame.shown_views()) == ("code", "surface", "grads", "timeline") and r.notes == []


def test_a_default_export_keeps_the_view_its_lesson_is_about(qapp) -> None:
    """zero-grad-myths is about lr and memory, which the inspector's readouts show."""
    with renderer("zero-grad-myths", (1280, 720), DEFAULT_VIEWS, fit=True) as r:
        run_inline(r.prepare(plan_of(r).ticks()))
        assert "grads" in r.frame.shown_views() and not r.frame.problems()
        readout = r.frame.views["grads"].findChildren(QLabel)
        assert any("lr 0.01" in label.text() and label.isVisibleTo(r.frame) for label in readout)


def test_views_asked_for_that_do_not_fit_are_refused_in_one_sentence(qapp) -> None:
    with pytest.raises(UserError, match=r"^640x480 is too small to draw surface, grads, code, timeline "):
        r = renderer("forgot-zero-grad", (640, 480))
        run_inline(r.prepare(plan_of(r, ops=8).ticks()))


# --- nothing overlaps or is cut at the least size accepted -----------------------------------------


@pytest.mark.parametrize("scenario", ["forgot-zero-grad", "set-to-none", "zero-grad-myths"])
def test_at_the_least_size_it_names_every_frame_is_laid_out_without_overlaps(qapp, scenario: str) -> None:
    w, h = needed(scenario, per_frame="iteration", iterations=10)
    # The size the refusal names is accepted, and one clearly smaller either way is not. (Least
    # sizes trade width for height, and a wrap that moves by a pixel can go either way, so the
    # named one is near the least, not a pixel-exact bound.)
    for smaller in ((w - 40, h), (w, h - 40)):
        with pytest.raises(UserError, match="too small"):
            r = renderer(scenario, smaller)
            run_inline(r.prepare(plan_of(r, per_frame="iteration", iterations=10).ticks()))
    with renderer(scenario, (w, h)) as r:
        plan = plan_of(r, per_frame="iteration", iterations=10)
        for image in rendered(r, plan):
            frame = r.frame
            assert image.shape == (h, w, 3) and (frame.width(), frame.height()) == (w, h)
            inside = QRect(0, 0, w, h)
            caption = frame.caption_rect()
            assert caption is not None and inside.contains(caption)
            placed = boxes(frame)
            assert set(placed) == set(FOUR)
            for key, box in placed.items():
                assert inside.contains(box), key
                assert not box.intersects(caption), key
            for (a, ra), (b, rb) in itertools.combinations(placed.items(), 2):
                assert not ra.intersects(rb), (a, b)
            assert frame.problems() == []


def test_the_old_stated_least_size_of_four_views_is_no_longer_accepted(qapp) -> None:
    # 678x528 was accepted for all four views while the surface's caption ran under the
    # timeline's title and the timeline's legend under its plot.
    with pytest.raises(UserError, match=r"678x528 is too small .* it needs at least (\d+)x(\d+)"):
        r = renderer("forgot-zero-grad", (678, 528))
        run_inline(r.prepare(plan_of(r, per_frame="iteration", iterations=40).ticks()))


# --- axes that hold still ---------------------------------------------------------------------------


def test_axis_ranges_hold_for_the_whole_animation_and_the_surface_has_equal_units(qapp) -> None:
    with renderer("forgot-zero-grad", (1280, 720)) as r:
        plan = plan_of(r, per_frame="iteration", iterations=40)
        surface = r.frame.views["surface"]
        timeline = r.frame.views["timeline"]
        ranges = []
        for _ in rendered(r, plan):
            vb = surface.plot.getViewBox()
            rows = {key: tuple(map(tuple, p.getViewBox().viewRange())) for key, p in timeline.plots.items()}
            ranges.append((tuple(map(tuple, vb.viewRange())), rows))
        assert len(ranges) == 40
        assert all(r_ == ranges[0] for r_ in ranges), "an axis range changed during the animation"
        # The first run's path leaves the range a window starts with; the fixed range holds it all.
        path = surface.paths(r.moment())[0]
        (_, hx1), (hy0, _) = surface.home
        assert path[:, 0].max() > hx1 or path[:, 1].min() < hy0
        (x0, x1), (y0, y1) = ranges[0][0]
        assert x0 <= path[:, 0].min() and path[:, 0].max() <= x1
        assert y0 <= path[:, 1].min() and path[:, 1].max() <= y1
        # Equal units across and up, and the shading fills the plot.
        px, py = vb.viewPixelSize()
        assert px == pytest.approx(py, rel=0.02)
        xs, ys, _ = surface.grid()
        assert xs[0] <= x0 + px and xs[-1] >= x1 - px and ys[0] <= y0 + py and ys[-1] >= y1 - py
        # The timeline's x axis spans the export; its loss row every loss shown.
        assert ranges[0][1]["loss"][0][1] >= plan.ticks()[-1]


# --- the timeline shows no future --------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["set-to-none", "gan-detach"])
def test_the_timeline_of_the_first_frame_ends_at_its_tick(qapp, scenario: str) -> None:
    with renderer(scenario, (1280, 720), DEFAULT_VIEWS, fit=True) as r:
        plan = plan_of(r, ops=20)
        frames = rendered(r, plan)
        for k, tick in enumerate(plan.ticks()[:3]):
            next(frames)
            timeline = r.frame.views["timeline"]
            assert r.controller.cursor == tick
            # The lab was stepped to the end beforehand: the history holds the whole run.
            assert r.controller.history.last_tick >= plan.ticks()[-1]
            for key, curves in timeline.curves.items():
                for curve in curves:
                    x, _ = curve.getData()
                    if x is not None and len(x):
                        assert x.max() <= tick + 0.5, (key, k)
            image = timeline.strip_image.image
            assert image is not None and image.shape[0] == tick + 1
            # The curves do hold every op up to the frame's.
            x, _ = timeline.curves["loss"][0].getData()
            assert x is not None and len(x) == tick + 1


# --- nothing jumps between frames --------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["forgot-zero-grad", "set-to-none"])
def test_inspector_rows_and_the_code_s_scroll_hold_still(qapp, scenario: str) -> None:
    with renderer(scenario, (1280, 720)) as r:
        plan = plan_of(r, ops=40)
        table = r.frame.views["grads"].table
        editor = r.frame.views["code"].editor
        heights, tops = [], []
        for _ in rendered(r, plan):
            heights.append([table.rowHeight(row) for row in range(table.rowCount())])
            tops.append(editor.cursorForPosition(QPoint(0, 0)).blockNumber())
        assert len(heights) == 40 and all(h == heights[0] for h in heights)
        assert all(a == b for a, b in itertools.pairwise(tops))
        # The loop is in view: its first line and its last.
        code = r.frame.views["code"]
        loop = code.loop_rows()
        last = editor.cursorForPosition(QPoint(0, editor.viewport().height() - 2)).blockNumber()
        assert tops[0] <= loop.start and loop.stop - 1 <= last


# --- the caption's type -----------------------------------------------------------------------------


def test_a_long_caption_gets_smaller_type_that_fits_and_a_short_one_the_full_size_again(qapp) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QFontMetrics

    with renderer("forgot-zero-grad", (640, 480), ("surface",)) as r:
        frame = r.frame
        run_inline(r.prepare(plan_of(r, ops=4).ticks()))
        full = frame.frame_style.point_size + 2
        short = "yours: forward() computed the loss."
        long = " ".join([short] * 8)
        sizes = []
        for text in (short, long, short, long):
            r.render(caption=text)
            font = frame.caption.font()
            rect = frame.caption.contentsRect()
            needed = QFontMetrics(font).boundingRect(
                QRect(0, 0, rect.width() - 16, 10_000), Qt.TextFlag.TextWordWrap, text
            )
            assert needed.height() <= rect.height() - 8, (text, font.pointSizeF())
            sizes.append(font.pointSizeF())
        assert sizes[0] == sizes[2] == full
        assert sizes[1] == sizes[3] < full, "the same sentence gets the same type in every frame"
