"""GIF export: gradviz against the common matplotlib recipe, side by side in one run.

Both make the same 120-frame 640x480 animation of ``forgot-zero-grad``: the
loss surface (shade and contours), each run's path so far, and an arrow at each
run's current point. The matplotlib side is the usual recipe (contourf +
contour + line + quiver, redrawn by ``FuncAnimation`` and saved with
``PillowWriter``); it gets the trajectory ready-made from the same engine, so
its time is drawing and encoding only. gradviz's time is the whole export:
building the lab, stepping it, drawing with the window's views, and encoding.

Run: ``QT_QPA_PLATFORM=offscreen PYTHONPATH=. .venv/bin/python bench/bench_export.py [--repeats 3]``
``[--keep DIR]`` (needs matplotlib, which gradviz itself does not depend on).

A second section encodes the same video frames twice: in process through PyAV
(what ``gradviz export -o out.mp4`` does) and piped raw into an ``ffmpeg``
program with the same codec settings (what gradviz did before). Both sides get
frames rendered once beforehand, so their times are conversion to YUV and
encoding only. It is skipped, with a line saying so, when no ``ffmpeg`` is on
PATH (``apt install ffmpeg``; gradviz itself does not need it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SCENARIO = "forgot-zero-grad"
FRAMES = 120
SIZE = (640, 480)
FPS = 12


@dataclass(frozen=True)
class Trajectory:
    """What the matplotlib side draws: run names, paths and gradients per frame, the surface grid."""

    names: list[str]
    paths: list[dict[str, np.ndarray]]
    arrows: list[dict[str, tuple[float, float]]]
    grid: tuple[np.ndarray, np.ndarray, np.ndarray]


def trajectory(ops: int) -> Trajectory:
    """The runs' paths and gradients after every op, and the surface, read from the engine."""
    from gradviz.engine.lab import Lab, set_threads
    from gradviz.engine.scenario import load_scenario
    from gradviz.engine.surface import surface_model

    set_threads(1)
    lab = Lab(load_scenario(SCENARIO))
    model = surface_model(lab)
    assert model is not None
    names = [r.name for r in lab.runs]
    points = {n: [model.point(lab.initial(n).params)] for n in names}
    paths: list[dict[str, np.ndarray]] = []
    arrows: list[dict[str, tuple[float, float]]] = []
    grads = {n: (0.0, 0.0) for n in names}
    for _ in range(ops):
        for rec in lab.step():
            if rec.op == "step":
                points[rec.run].append(model.point(rec.params))
            grads[rec.run] = model.vector(rec.grads) or (0.0, 0.0)
        paths.append({n: np.asarray(points[n]) for n in names})
        arrows.append(dict(grads))
    everything = np.concatenate([p for p in paths[-1].values()])
    lo, hi = everything.min(axis=0), everything.max(axis=0)
    pad = 0.2 * (hi - lo) + 0.1
    xs = np.linspace(lo[0] - pad[0], hi[0] + pad[0], 121)
    ys = np.linspace(lo[1] - pad[1], hi[1] + pad[1], 121)
    gx, gy = np.meshgrid(xs, ys)
    return Trajectory(names, paths, arrows, (gx, gy, model.evaluate(gx, gy)))


def matplotlib_gif(data: Trajectory, out: Path) -> None:
    """The usual recipe: draw the surface once, update line and quiver per frame, PillowWriter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation, PillowWriter
    from matplotlib.artist import Artist

    gx, gy, z = data.grid
    names, paths, arrows = data.names, data.paths, data.arrows
    fig, ax = plt.subplots(figsize=(SIZE[0] / 100, SIZE[1] / 100), dpi=100)
    ax.contourf(gx, gy, np.log10(z + 1e-12), levels=20, cmap="Greys_r")
    ax.contour(gx, gy, np.log10(z + 1e-12), levels=9, colors="#505050", linewidths=0.8)
    ax.set_xlabel("weight")
    ax.set_ylabel("bias")
    colours = ("#D55E00", "#0072B2")
    lines = [ax.plot([], [], "-o", ms=3, color=colours[i], label=n)[0] for i, n in enumerate(names)]
    quivers = [
        ax.quiver([0], [0], [0], [0], color=colours[i], angles="xy", scale_units="xy", scale=1)
        for i in range(len(names))
    ]
    ax.legend(loc="upper left")
    fig.tight_layout()

    def update(i: int) -> list[Artist]:
        for k, name in enumerate(names):
            p = paths[i][name]
            lines[k].set_data(p[:, 0], p[:, 1])
            gx_, gy_ = arrows[i][name]
            quivers[k].set_offsets([p[-1]])
            quivers[k].set_UVC([-0.05 * gx_], [-0.05 * gy_])
        return [*lines, *quivers]

    anim = FuncAnimation(fig, update, frames=len(paths), blit=False)
    anim.save(str(out), writer=PillowWriter(fps=FPS))
    plt.close(fig)


def gradviz_gif(out: Path, caption: bool) -> None:
    """``gradviz export forgot-zero-grad --ops 120 --views surface --size 640x480``, in process."""
    from gradviz.gui.export_frames import ExportRange, FrameStyle, export_animation

    style = FrameStyle(SIZE, ("surface",), caption=caption)
    export_animation(SCENARIO, out, style=style, fps=FPS, frames=ExportRange(ops=FRAMES))


def rendered_frames(count: int) -> list[np.ndarray]:
    """``count`` frames of the surface view, one per op, as the export draws them."""
    from gradviz.export.plan import plan_frames
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_renderer import FrameRenderer, run_inline

    renderer = FrameRenderer(SCENARIO, FrameStyle(SIZE, ("surface",)))
    try:
        run_inline(renderer.open())
        plan = plan_frames(renderer.ticks_per_iteration, ops=count)
        return [frame.copy() for frame in renderer.frames(plan.ticks())]
    finally:
        renderer.close()


def pyav_video(frames: list[np.ndarray], out: Path) -> None:
    """gradviz's own writer: PyAV, FFmpeg's libraries in this process."""
    from gradviz.export.video import VideoWriter

    h, w, _ = frames[0].shape
    with VideoWriter(out, (w, h), FPS) as writer:
        for frame in frames:
            writer.add(frame)
        writer.commit()


def ffmpeg_command(binary: str, size: tuple[int, int], out: Path) -> list[str]:
    """The ffmpeg program's equivalent of the writer's settings (see gradviz.export.video)."""
    from gradviz.export.video import PIXEL_FORMAT, VIDEO_FORMATS, find_encoder

    suffix = out.suffix
    encoder = find_encoder(suffix)
    assert encoder is not None
    fmt = VIDEO_FORMATS[suffix]
    cmd = [binary, "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]
    cmd += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{size[0]}x{size[1]}", "-framerate", f"{FPS}"]
    cmd += ["-i", "pipe:0", "-an", "-vf", "scale=out_color_matrix=bt709:out_range=tv"]
    cmd += ["-c:v", encoder.name, "-pix_fmt", PIXEL_FORMAT]
    for key, value in encoder.options.items():
        cmd += [f"-{key}", value]
    cmd += ["-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv"]
    for key, value in fmt.options.items():
        cmd += [f"-{key}", value]
    return [*cmd, "-f", fmt.muxer, str(out)]


def ffmpeg_video(binary: str, frames: list[np.ndarray], out: Path) -> None:
    """The ffmpeg program reading raw RGB frames on stdin, as gradviz used to export video."""
    h, w, _ = frames[0].shape
    proc = subprocess.Popen(ffmpeg_command(binary, (w, h), out), stdin=subprocess.PIPE)
    assert proc.stdin is not None
    for frame in frames:
        proc.stdin.write(frame.tobytes())
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError(f"ffmpeg exited with status {proc.returncode}")


def timed(fn: Callable[..., None], *args: object) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def cpu_timed(fn: Callable[..., None], *args: object) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one call (CPU time, of every thread of the process, barely
    moves when other programs load the machine, so its ratio holds on a busy one)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, help="write the GIFs into this folder (default: a temporary one)"
    )
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args.keep, args.repeats)
    else:
        with tempfile.TemporaryDirectory(prefix="gradviz-bench-") as folder:
            run(Path(folder), args.repeats)


def run(folder: Path, repeats: int) -> None:
    """Time both sides ``repeats`` times, interleaved, and print medians and ratios."""

    import matplotlib
    import PIL

    from gradviz.gui.display import frames_application

    frames_application(("surface",), "light", 10.0)
    data = trajectory(FRAMES)  # also pays torch's first-use costs for both sides
    out = {"gradviz": folder / "gradviz.gif", "caption": folder / "caption.gif", "mpl": folder / "mpl.gif"}
    gradviz_gif(out["gradviz"], False)  # warm-up: Qt's fonts and pyqtgraph's first draw
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in out}
    for _ in range(repeats):
        times["gradviz"].append(cpu_timed(gradviz_gif, out["gradviz"], False))
        times["caption"].append(cpu_timed(gradviz_gif, out["caption"], True))
        times["mpl"].append(cpu_timed(matplotlib_gif, data, out["mpl"]))
    t = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    c = {k: statistics.median(u for _, u in v) for k, v in times.items()}
    size = {k: p.stat().st_size for k, p in out.items()}
    load = os.getloadavg()
    print(
        f"{FRAMES} frames {SIZE[0]}x{SIZE[1]}, {SCENARIO}, median of {repeats}; "
        f"matplotlib {matplotlib.__version__}, Pillow {PIL.__version__}; "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"{'':34} {'time':>8} {'CPU':>8} {'size':>10}")
    rows = (
        ("matplotlib FuncAnimation+Pillow", "mpl"),
        ("gradviz export (no caption)", "gradviz"),
        ("gradviz export (with caption)", "caption"),
    )
    for label, key in rows:
        print(f"{label:34} {t[key]:7.2f}s {c[key]:7.2f}s {size[key] / 1024:8.0f} KB")
    print(
        f"gradviz is {t['mpl'] / t['gradviz']:.1f}x faster ({c['mpl'] / c['gradviz']:.1f}x in CPU time) "
        f"and {size['gradviz'] / size['mpl']:.2f}x the size; with captions {t['mpl'] / t['caption']:.1f}x "
        f"faster ({c['mpl'] / c['caption']:.1f}x in CPU time), {size['caption'] / size['mpl']:.2f}x the size "
        "(target: at least 9x faster, at most 1.00x the size, with captions too)."
    )
    video(folder, repeats)


def video(folder: Path, repeats: int) -> None:
    """MP4 and WebM: PyAV in process against the ffmpeg program fed through a pipe, same frames."""
    import av

    from gradviz.export.video import VIDEO_FORMATS, find_encoder

    print()
    binary = shutil.which("ffmpeg")
    if binary is None:
        print("Video: no ffmpeg program on PATH to compare with (apt install ffmpeg); skipped.")
        return
    frames = rendered_frames(FRAMES)
    version = subprocess.run([binary, "-version"], capture_output=True, text=True).stdout.split()[2]
    print(
        f"Video: the same {len(frames)} rendered frames {SIZE[0]}x{SIZE[1]} at {FPS} fps, encode only, "
        f"median of {repeats}; PyAV {av.__version__} (FFmpeg {av.ffmpeg_version_info}) "
        f"against the ffmpeg {version} program"
    )
    print(f"{'':44} {'time':>8} {'size':>10}")
    for suffix in (".mp4", ".webm"):
        encoder = find_encoder(suffix)
        assert encoder is not None
        name = VIDEO_FORMATS[suffix].label
        out = {"pyav": folder / f"pyav{suffix}", "ffmpeg": folder / f"ffmpeg{suffix}"}
        pyav_video(frames, out["pyav"])  # warm-up: the libraries' first load
        times: dict[str, list[float]] = {k: [] for k in out}
        for _ in range(repeats):
            times["pyav"].append(timed(pyav_video, frames, out["pyav"]))
            times["ffmpeg"].append(timed(ffmpeg_video, binary, frames, out["ffmpeg"]))
        t = {k: statistics.median(v) for k, v in times.items()}
        size = {k: p.stat().st_size for k, p in out.items()}
        label = f"{name} {encoder.codec} ({encoder.name}"
        print(f"{label + ', PyAV in process)':44} {t['pyav']:7.2f}s {size['pyav'] / 1024:8.0f} KB")
        print(f"{label + ', ffmpeg program, pipe)':44} {t['ffmpeg']:7.2f}s {size['ffmpeg'] / 1024:8.0f} KB")
        print(
            f"{name}: PyAV takes {t['pyav'] / t['ffmpeg']:.2f}x the ffmpeg pipe's time "
            f"and writes {size['pyav'] / size['ffmpeg']:.2f}x its size."
        )


if __name__ == "__main__":
    main()
