"""The timeline's end labels keep off the curves: a name goes where it hides none of the row's
lines and markers if such a place exists near its marker, and placing costs nothing when nothing
under it changed."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import press, settle
from PySide6.QtCore import QPointF, QRectF, Qt

from gradviz.gui.window_history import Moment


def _hidden_by(rect: QRectF, tl, key: str) -> list[tuple[str, int, float]]:
    """Each curve of row ``key`` under ``rect`` (scene coordinates): its run, how many of its drawn
    points and how many pixels of its line lie inside (the line sampled finely, not clipped)."""
    box = tl.plots[key].getViewBox()
    (x0, x1), (y0, y1) = box.viewRange()
    area = box.sceneBoundingRect()
    out = []
    for i, curve in enumerate(tl.curves[key]):
        x, y = curve.getData()
        sx = area.left() + (np.asarray(x) - x0) / (x1 - x0) * area.width()
        sy = area.top() + (y1 - np.asarray(y)) / (y1 - y0) * area.height()

        def inside(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return (a > rect.left()) & (a < rect.right()) & (b > rect.top()) & (b < rect.bottom())

        drawn = np.isfinite(sy[:-1]) & np.isfinite(sy[1:])
        t = np.linspace(0.0, 1.0, 400)[:, None]
        ax, bx, ay, by = sx[:-1][drawn], sx[1:][drawn], sy[:-1][drawn], sy[1:][drawn]
        share = inside(ax + t * (bx - ax), ay + t * (by - ay)).mean(axis=0)
        ink = float((share * np.hypot(bx - ax, by - ay)).sum())
        out.append((tl.info.runs[i].name, int(inside(sx, sy).sum()), ink))
    return out


@pytest.mark.parametrize(
    ("scenario", "ops", "key"),
    [
        ("net-vs-optimizer-zero-grad", 24, "loss"),  # two runs whose losses cross at their ends
        ("backward-twice", 12, "loss"),  # a run ending above the lines of two that go on
        ("backward-twice", 12, "grad"),
    ],
)
def test_an_end_label_hides_no_curve_where_a_free_place_is_near_it(
    open_window, qtbot, scenario, ops, key
) -> None:
    w = open_window(scenario)
    press(qtbot, w, Qt.Key.Key_Right, ops)
    settle(qtbot, w)
    tl = w.timeline
    tl.graphics.grab()  # painted: items follow their view's range as they paint
    labels = tl.end_labels[key]
    box = tl.plots[key].getViewBox()
    markers = [box.mapViewToScene(QPointF(x, y)) for x, y in labels.marker_points()]
    shown = [item for item in labels.items if item.isVisible()]
    assert shown, (scenario, key)
    for item in shown:
        rect = item.sceneBoundingRect()
        hidden = [
            (run, points, round(ink)) for run, points, ink in _hidden_by(rect, tl, key) if points or ink > 1
        ]
        assert not hidden, (scenario, key, item.textItem.toPlainText(), "hides", hidden)
        # Still beside its marker: within a line's height of the nearest one.
        near = min(
            max(rect.left() - m.x(), m.x() - rect.right(), rect.top() - m.y(), m.y() - rect.bottom(), 0.0)
            for m in markers
        )
        assert near <= rect.height(), (scenario, key, item.textItem.toPlainText(), near)


def test_a_frame_that_changes_no_curve_places_no_label_again(open_window, qtbot, monkeypatch) -> None:
    from gradviz.gui.views.timeline import EndLabels

    w = open_window("forgot-zero-grad")
    press(qtbot, w, Qt.Key.Key_Right, 9)
    settle(qtbot, w)
    tl, c = w.timeline, w.controller
    weighed: list[object] = []
    # Every line placed asks first whether its nearest place lies past every curve.
    past = EndLabels._past_every_curve
    monkeypatch.setattr(
        EndLabels, "_past_every_curve", lambda self, *a: weighed.append(self) or past(self, *a)
    )
    tl._drawn = None  # every row drawn again, as a frame with a new op would
    tl.draw(Moment(c.info, c.history, c.history.last_tick))
    assert weighed == [], "the same points, range and ends: the names stay where they are"
    press(qtbot, w, Qt.Key.Key_Right, 1)
    assert weighed, "a new op's points are weighed"


def test_a_line_between_two_points_counts_where_it_crosses_a_box() -> None:
    from gradviz.gui.views.timeline import line_inside

    boxes = np.array([(10.0, 10.0, 20.0, 20.0), (30.0, 0.0, 40.0, 5.0)])
    # From far left to far right through the first box's middle, no point inside either box.
    assert line_inside(boxes, np.array([[0.0, 100.0], [15.0, 15.0]])) == pytest.approx([10.0, 0.0])
    # A diagonal through the first box's corners, a gap, a vertical line down the second's middle.
    x, y = np.array([0.0, 30.0, np.nan, 35.0, 35.0]), np.array([0.0, 30.0, np.nan, -50.0, 50.0])
    assert line_inside(boxes, np.stack((x, y))) == pytest.approx([10 * np.sqrt(2), 5.0])
    # A gap across the first box: nothing drawn there; a line that ends before it.
    x, y = (
        np.array([0.0, np.nan, 100.0, np.nan, 0.0, 9.0]),
        np.array([15.0, np.nan, 15.0, np.nan, 15.0, 15.0]),
    )
    assert line_inside(boxes, np.stack((x, y))) == pytest.approx([0.0, 0.0])


def test_no_end_label_lies_under_a_marker_where_a_place_beside_them_is_free(open_window, qtbot) -> None:
    """Markers are drawn over the names, so a name under one loses letters: in a short row whose
    curves crowd the place left of the markers (forgot-zero-grad's ‖.grad‖ at its end), the names
    still go beside the markers, not across them."""
    w = open_window("forgot-zero-grad")
    press(qtbot, w, Qt.Key.Key_Right, 160)
    settle(qtbot, w)
    tl = w.timeline
    tl.graphics.grab()
    for key, labels in tl.end_labels.items():
        if not tl.plots[key].isVisible():
            continue
        box = tl.plots[key].getViewBox()
        r = labels.marker_size / 2
        markers = [box.mapViewToScene(QPointF(x, y)) for x, y in labels.marker_points()]
        for item in (item for item in labels.items if item.isVisible()):
            rect = item.sceneBoundingRect().adjusted(-r, -r, r, r)
            under = [m for m in markers if rect.contains(m)]
            assert not under, (key, item.textItem.toPlainText(), "under", under)
