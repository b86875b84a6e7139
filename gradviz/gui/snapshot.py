"""``gradviz snapshot``: render the main window offscreen after some ops and write a PNG."""

from __future__ import annotations

from gradviz.gui.display import application, has_display
from gradviz.gui.render import save_png


def write_snapshot(
    scenario_arg: str,
    output: str,
    *,
    ops: int,
    size: tuple[int, int],
    presentation: bool,
    three_d: bool = False,
) -> None:
    """Open ``scenario_arg``, perform ``ops`` ticks, and write the window as a PNG to ``output``.

    Parameters
    ----------
    scenario_arg:
        A built-in scenario name or a scenario file.
    output:
        The PNG file to write (replaced atomically); its name ends in ``.png``.
    ops:
        Ticks to perform before the picture (fewer if every run stops first), 0 to
        :data:`~gradviz.engine.scenario.SNAPSHOT_OPS`'s 10,000.
    size:
        Width and height of the window in pixels, and so of the picture. A size
        the window cannot be made as small as is refused, never enlarged.
    presentation:
        Render in presentation mode: large type, no chrome, the presentation views.
    three_d:
        Show the 3-D surface beside the 2-D one. It needs OpenGL, so the picture is
        rendered on the display platform in use (under ``xvfb-run`` on a machine
        without a display) instead of offscreen; without OpenGL the 3-D view shows
        why in its place.

    Raises
    ------
    UserError
        For an unknown scenario, an invalid file, an output path that cannot be written
        or that does not end in ``.png``, or a size smaller than the window can be.
    """
    from gradviz.engine.errors import UserError, quoted
    from gradviz.engine.scenario import SNAPSHOT_OPS, check_bounds
    from gradviz.export.outputs import check_output_file
    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    check_bounds(ops, SNAPSHOT_OPS, None, "--ops")  # the window's lab keeps every op
    check_output_file(output)  # the same check as an export's, before any work
    if not output.lower().endswith(".png"):
        shown = quoted(output, 160, bare=True)
        raise UserError(f"{shown}: snapshot writes PNG; allowed: a name ending in .png.")
    if three_d and not has_display():
        raise UserError(
            "--3d draws with OpenGL, which needs a display; without one, run it under a virtual "
            "one: xvfb-run -a gradviz snapshot ... --3d."
        )
    app = application(offscreen=not three_d)
    controller = Controller(threaded=False)
    window = MainWindow(controller, interactive=False)
    try:
        window.resize(*size)
        if three_d:
            window.set_surface3d(True)
        if presentation:
            window.set_presentation(True, full_screen=False)
        window.show()
        controller.open(scenario_arg)
        if controller.info is None:
            raise UserError(window.last_error or f"The scenario {quoted(scenario_arg)} could not be opened.")
        for _ in range(ops):
            if not controller.next_op():
                break
        window.resize(*size)
        if three_d:
            window.set_surface3d(True)  # again, now that the window has its size: halves the column
        app.processEvents()
        window.redraw()
        app.processEvents()
        if (window.width(), window.height()) != size:
            # The views' readable minimums hold the window larger than asked: say so, write nothing.
            need = max(size[0], window.width()), max(size[1], window.height())
            raise UserError(
                f"{size[0]}x{size[1]} is too small for the window"
                f"{' in presentation mode' if presentation else ''}: it needs at least "
                f"{need[0]}x{need[1]}; choose a larger --size."
            )
        save_png(window.grab().toImage(), output)
    finally:
        controller.shutdown()
        window.close()
        window.deleteLater()
        app.processEvents()
