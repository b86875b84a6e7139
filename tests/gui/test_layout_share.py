"""How the shared layout gives each view the room its content needs (Qt-free)."""

from __future__ import annotations

from gradviz.engine.scenario import load_builtin
from gradviz.gui.export_lesson import stop_views
from gradviz.gui.layout import PRESENTATION_MIN_SCALE, beside_lesson, share


def test_where_everything_fits_each_view_gets_its_content_and_the_first_the_rest() -> None:
    assert share(1000, [300, 200], [500, 350]) == [650, 350]


def test_where_only_the_least_fits_each_keeps_it_and_the_rest_goes_by_what_is_missing() -> None:
    sizes = share(600, [300, 200], [500, 300])
    assert sum(sizes) == 600 and sizes[0] >= 300 and sizes[1] >= 200
    assert sizes == [367, 233]  # 100 spare: two thirds to the code, which lacks 200 of the 300


def test_where_not_even_the_least_fits_the_leading_rows_keep_theirs_and_the_code_scrolls() -> None:
    assert share(300, [400, 200], [500, 300]) == [100, 200]
    assert share(150, [400, 200], [500, 300]) == [0, 150]


def test_beside_a_lesson_the_surface_gives_way_where_the_panel_leaves_too_little_room() -> None:
    views = ("code", "surface", "grads", "surface3d")
    assert beside_lesson(views, 640, PRESENTATION_MIN_SCALE) == ("code", "grads")
    assert beside_lesson(views, 960, PRESENTATION_MIN_SCALE) == ("code", "surface", "grads")


def test_a_question_about_the_weights_reads_the_surface_and_one_about_grad_does_not() -> None:
    forgot = [s for s in load_builtin("forgot-zero-grad").lesson.stops if s.questions]
    assert {"surface", "grads", "code"} <= stop_views(forgot[0])  # lr, the weights, .grad, memory
    assert "surface" not in stop_views(forgot[1])  # what .grad holds after a backward
    gan = load_builtin("gan-detach").lesson.stops
    assert all("timeline" not in stop_views(s) for s in gan)
