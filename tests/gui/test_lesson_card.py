"""A lesson card in an export covers none of the evidence its question and reveal talk about:
the code's current line, the inspector's leading rows, and any view the stop's questions read."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QRect

from gradviz.gui.export_frame import ExportFrame, FrameStyle


def _code_line_boxes(frame: ExportFrame) -> list[QRect]:
    """The code's line that runs next, as laid out in the frame (none when the code is not shown)."""
    code = frame.views.get("code")
    if code is None or not code.isVisibleTo(frame):
        return []
    _, next_line = code.line_state()
    editor = code.editor
    out = []
    for row, d in enumerate(code.lines):
        if d.number == next_line:
            block = editor.document().findBlockByNumber(row)
            line = editor.blockBoundingGeometry(block).translated(editor.contentOffset()).toRect()
            top_left = editor.viewport().mapTo(frame, line.topLeft())
            out.append(QRect(top_left.x(), top_left.y(), editor.viewport().width(), line.height()))
    return out


def _lead_row_boxes(frame: ExportFrame) -> list[QRect]:
    """The inspector's rows the lesson leads with, as laid out in the frame."""
    grads = frame.views.get("grads")
    if grads is None or not grads.isVisibleTo(frame):
        return []
    table = grads.table
    out = []
    for row, r in enumerate(grads.shown_rows):
        if r.lead:
            top_left = table.viewport().mapTo(frame, table.visualRect(table.model().index(row, 0)).topLeft())
            out.append(QRect(top_left.x(), top_left.y(), table.viewport().width(), table.rowHeight(row)))
    return out


def _read_views(frame: ExportFrame, reads) -> list[QRect]:
    """The surfaces and timeline a stop's questions read, where the frame shows them."""
    out = []
    for key in reads:
        view = frame.views.get(key)
        if key not in ("code", "grads") and view is not None and view.isVisibleTo(frame):
            out.append(QRect(view.mapTo(frame, view.rect().topLeft()), view.size()))
    return out


@pytest.mark.parametrize(
    ("scenario", "presentation"),
    [
        ("forgot-zero-grad", False),
        ("two-batch-accumulation", False),
        ("backward-twice", False),
        ("grad-accumulation", False),
        ("rnn-tbptt", True),
        ("set-to-none", False),
        ("manual-sgd", False),
        ("standard-loop", False),
    ],
)
def test_question_and_reveal_cards_leave_the_current_line_and_lead_rows_in_sight(
    qapp, tmp_path: Path, scenario: str, presentation: bool
) -> None:
    from gradviz.gui.export_frames import ExportJob, ExportRange
    from gradviz.gui.export_renderer import run_inline
    from gradviz.gui.layout import DEFAULT_VIEWS

    style = FrameStyle((1280, 720), DEFAULT_VIEWS, presentation=presentation, fit=True)
    job = ExportJob(scenario, tmp_path / "a.gif", style=style, fps=2, frames=ExportRange(lesson=True))
    work = job.work()
    next(work)
    renderer = job.renderer
    seen: list[tuple[QRect, list[QRect]]] = []
    render = renderer.render

    def looked_at(card: str = "", caption: str | None = None, reads=()):
        image = render(card, caption, reads)
        frame = renderer.frame
        if card:
            assert frame.card.isVisibleTo(frame)
            evidence = _code_line_boxes(frame) + _lead_row_boxes(frame) + _read_views(frame, reads)
            seen.append((frame.card.geometry(), evidence))
        return image

    renderer.render = looked_at  # type: ignore[method-assign]
    run_inline(work)
    assert len(seen) >= 2 and all(evidence for _, evidence in seen)
    inside = QRect(0, 0, *style.size)
    for card, evidence in seen:
        assert inside.contains(card)
        for box in evidence:
            assert not card.intersects(box), (card, box)
