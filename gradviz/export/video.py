"""MP4 and WebM through an ``ffmpeg`` binary: frames are piped in raw as they are drawn."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from gradviz.engine.errors import UserError
from gradviz.export.atomic import AtomicFile
from gradviz.export.base import FrameWriter, Progress
from gradviz.export.frames import check_frame
from gradviz.export.outputs import FFMPEG_HINT, find_ffmpeg

CODECS = {
    # yuv420p is what browsers, slide software and phones all play.
    ".mp4": ["-f", "mp4", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-crf", "18", "-movflags", "+faststart"],
    ".webm": ["-f", "webm", "-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p", "-crf", "32", "-b:v", "0"],
}


def ffmpeg_command(binary: str, size: tuple[int, int], fps: float, suffix: str, out: Path) -> list[str]:
    """The ffmpeg command line that reads raw RGB frames on stdin and writes ``out``."""
    w, h = size
    cmd = [binary, "-hide_banner", "-loglevel", "error", "-nostdin", "-y"]
    cmd += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-framerate", f"{fps:g}", "-i", "pipe:0"]
    if w % 2 or h % 2:
        # 4:2:0 chroma needs even sides: pad by one pixel rather than scale (text stays sharp).
        cmd += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
    cmd += ["-an", "-map_metadata", "-1", "-fflags", "+bitexact", *CODECS[suffix], str(out)]
    return cmd


class VideoWriter(FrameWriter):
    """Streams frames into ffmpeg, which writes a temporary file renamed into place on commit.

    Parameters
    ----------
    path:
        The ``.mp4`` or ``.webm`` file to write.
    size:
        Width and height of every frame.
    fps:
        Frames per second.
    """

    def __init__(self, path: Path, size: tuple[int, int], fps: float) -> None:
        binary = find_ffmpeg()
        if binary is None:
            raise UserError(f"Writing {path.suffix} video needs ffmpeg, which was not found: {FFMPEG_HINT}.")
        if not fps > 0:
            raise ValueError(f"frame rate must be positive, not {fps}")
        self.path = path
        self.size = size
        self.fps = fps
        self.count = 0
        self._file = AtomicFile(path, suffix=path.suffix.lower())
        # ffmpeg's messages go to a file: a pipe nobody reads while frames are written could fill and block.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in commit or abort
        self._proc = subprocess.Popen(
            ffmpeg_command(binary, size, fps, path.suffix.lower(), self._file.temp),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def __len__(self) -> int:
        return self.count

    def _failure(self) -> UserError:
        self._log.seek(0)
        lines = [ln.strip() for ln in self._log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        why = lines[-1].rstrip(".") if lines else f"exit status {self._proc.returncode}"
        return UserError(f"ffmpeg could not write {self.path.name} ({why}); try a .gif instead.")

    def add(self, frame: np.ndarray) -> None:
        """Send one ``(height, width, 3)`` uint8 RGB frame to ffmpeg."""
        data = check_frame(frame, self.size).tobytes()
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
        except BrokenPipeError:
            self._proc.wait()
            self.abort()
            raise self._failure() from None
        self.count += 1

    def commit(self, progress: Progress | None = None) -> Path:
        """Let ffmpeg finish and put the video in place."""
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._proc.stdin.close()
        if self._proc.wait() != 0:
            error = self._failure()
            self.abort()
            raise error
        self._log.close()
        return self._file.commit()

    def abort(self) -> None:
        """Stop ffmpeg and remove its partial file; an existing video stays as it was."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        self._file.abort()
        if not self._log.closed:
            self._log.close()
