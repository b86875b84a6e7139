"""MP4 (H.264) and WebM (VP9) encoded in this process by FFmpeg's libraries, which PyAV's wheels ship.

No ``ffmpeg`` program is needed: each frame is converted and encoded as it is
drawn, and the container is written to a temporary file renamed into place on
commit. PyAV is imported only when a video is written, so the window's start-up
does not pay for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gradviz.engine.errors import UserError
from gradviz.export.atomic import AtomicFile
from gradviz.export.base import FrameWriter, Progress
from gradviz.export.frames import check_frame
from gradviz.export.interrupt import check_interrupt

if TYPE_CHECKING:
    from av.container import OutputContainer
    from av.video.stream import VideoStream

# Frame rates are stored as fractions: 2.5 fps is 5/2, 29.97 is 2997/100.
MAX_DENOMINATOR = 1000


# How RGB becomes YUV, tagged in the stream so that players convert back the same way:
# BT.709, which players assume for screen-sized video (untagged BT.601 pictures shift orange
# towards red in browsers); VP8 knows only BT.601.
BT709 = 1
BT601 = 5


@dataclass(frozen=True)
class Encoder:
    """One FFmpeg encoder and the options gradviz gives it.

    Attributes
    ----------
    name:
        FFmpeg's name of the encoder (``"libx264"``).
    codec:
        The codec it writes, as messages name it (``"H.264"``).
    options:
        Encoder options.
    matrix:
        The YUV matrix (an FFmpeg ``AVColorSpace``) frames are converted with and tagged as.
    """

    name: str
    codec: str
    options: dict[str, str] = field(default_factory=dict)
    matrix: int = BT709


@dataclass(frozen=True)
class VideoFormat:
    """A video container: its FFmpeg muxer, the encoders to try in order, and their constraints.

    Attributes
    ----------
    label:
        How messages name the format (``"MP4"``).
    muxer:
        FFmpeg's name for the container.
    encoders:
        Tried in order; the first that this PyAV build has is used.
    options:
        Muxer options.
    even_sides:
        Whether the picture needs an even width and height (H.264's 4:2:0
        chroma cannot describe a half pixel; VP9 can).
    """

    label: str
    muxer: str
    encoders: tuple[Encoder, ...]
    options: dict[str, str]
    even_sides: bool


VIDEO_FORMATS = {
    # +faststart puts the index first, so a browser or slide program starts playing before
    # the whole file has loaded; bitexact leaves out the library's version string.
    ".mp4": VideoFormat(
        "MP4",
        "mp4",
        (Encoder("libx264", "H.264", {"crf": "18"}),),
        {"movflags": "+faststart", "fflags": "+bitexact"},
        even_sides=True,
    ),
    # crf with a zero bitrate is libvpx's constant-quality mode; VP8 needs a bitrate ceiling.
    ".webm": VideoFormat(
        "WebM",
        "webm",
        (
            Encoder("libvpx-vp9", "VP9", {"crf": "32", "b": "0", "row-mt": "1"}),
            Encoder("libvpx", "VP8", {"crf": "10", "b": "4M"}, matrix=BT601),
        ),
        {"fflags": "+bitexact"},
        even_sides=False,
    ),
}
# 4:2:0 is what browsers, slide software and phones all play, in limited (TV) range.
PIXEL_FORMAT = "yuv420p"
LIMITED_RANGE = 1


def frame_rate(fps: float) -> Fraction:
    """``fps`` as the exact fraction the container stores (``2.5`` is ``5/2``)."""
    if not fps > 0:
        raise ValueError(f"frame rate must be positive, not {fps}")
    return Fraction(fps).limit_denominator(MAX_DENOMINATOR)


def find_encoder(suffix: str) -> Encoder | None:
    """The first encoder for ``suffix`` (``".mp4"`` or ``".webm"``) that this PyAV has, or None."""
    import av

    for encoder in VIDEO_FORMATS[suffix].encoders:
        with contextlib.suppress(ValueError):  # av's UnknownCodecError
            if av.Codec(encoder.name, "w").is_encoder:
                return encoder
    return None


def encoded_size(suffix: str, size: tuple[int, int]) -> tuple[int, int]:
    """The picture size a video of ``size`` frames has: odd sides grow by one where the codec needs even."""
    w, h = size
    if VIDEO_FORMATS[suffix].even_sides:
        return w + w % 2, h + h % 2
    return w, h


def size_note(suffix: str, size: tuple[int, int]) -> str | None:
    """The sentence that says a video's size differs from its frames' (None when it does not)."""
    fmt = VIDEO_FORMATS[suffix]
    out = encoded_size(suffix, size)
    if out == size:
        return None
    return (
        f"{size[0]}x{size[1]} is odd; the {fmt.label} is {out[0]}x{out[1]} "
        f"({fmt.encoders[0].codec} needs even sides)."
    )


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text).rstrip(".")


class VideoWriter(FrameWriter):
    """Encodes each frame as it comes into a temporary file renamed into place on commit.

    A frame whose width or height is odd is padded on the right or bottom with
    a copy of its edge pixels for H.264, which needs even sides; :attr:`notes`
    then says so. WebM (VP9) keeps any size.

    Parameters
    ----------
    path:
        The ``.mp4`` or ``.webm`` file to write.
    size:
        Width and height of every frame.
    fps:
        Frames per second; the video's duration is frames / fps.

    Raises
    ------
    UserError
        When this PyAV has no encoder for the format, or the encoder refuses to start.
    """

    def __init__(self, path: Path, size: tuple[int, int], fps: float) -> None:
        import av

        self.suffix = path.suffix.lower()
        if self.suffix not in VIDEO_FORMATS:
            raise ValueError(f"not a video suffix: {path.suffix!r}")
        self.rate = frame_rate(fps)
        fmt = VIDEO_FORMATS[self.suffix]
        encoder = find_encoder(self.suffix)
        if encoder is None:
            names = " or ".join(e.name for e in fmt.encoders)
            raise UserError(
                f"The PyAV installed here has no {fmt.encoders[0].codec} encoder ({names}), so gradviz "
                f"cannot write {path.suffix} video; install PyAV's own wheel (pip install av) "
                "or export a .gif."
            )
        self.path = path
        self.size = size
        self.fps = fps
        self.encoder = encoder
        self.video_size = encoded_size(self.suffix, size)
        note = size_note(self.suffix, size)
        self.notes = () if note is None else (note,)
        self.count = 0
        self._closed = False
        self._file = AtomicFile(path, suffix=self.suffix)
        with self._aborting_on_failure():
            self._container: OutputContainer = av.open(
                str(self._file.temp), "w", format=fmt.muxer, options=fmt.options
            )
            stream = self._container.add_stream(encoder.name, rate=self.rate)
            assert isinstance(stream, av.VideoStream)
            self._stream: VideoStream = stream
            stream.width, stream.height = self.video_size
            stream.pix_fmt = PIXEL_FORMAT
            stream.options = dict(encoder.options)
            ctx = stream.codec_context
            # Frame and slice threads, as the ffmpeg program uses (PyAV's default is slices only,
            # which splits each H.264 frame into strips: about 1% larger here, no faster).
            ctx.thread_type = "AUTO"
            # The frames are sRGB, whose primaries and transfer are BT.709's.
            ctx.color_primaries = ctx.color_trc = BT709
            ctx.colorspace = encoder.matrix
            ctx.color_range = LIMITED_RANGE

    def __len__(self) -> int:
        return self.count

    @contextlib.contextmanager
    def _aborting_on_failure(self) -> Iterator[None]:
        """Remove the partial file on any failure; FFmpeg's and the OS's errors become a sentence.

        Interrupted (a KeyboardInterrupt) and anything else propagate as they are, but no partial
        file stays behind.
        """
        import av

        try:
            yield
        except (av.FFmpegError, OSError) as exc:
            self.abort()
            raise self._failure(exc) from None
        except BaseException:
            self.abort()
            raise

    def _failure(self, exc: BaseException) -> UserError:
        return UserError(
            f"The {self.encoder.name} encoder could not write {self.path.name} ({_reason(exc)}); "
            "try a .gif instead."
        )

    def _frame(self, frame: np.ndarray) -> np.ndarray:
        w, h = self.size
        vw, vh = self.video_size
        if (vw, vh) == (w, h):
            return frame
        # The edge pixels repeated, not black: the extra row or column is invisible at the border.
        return np.pad(frame, ((0, vh - h), (0, vw - w), (0, 0)), mode="edge")

    def add(self, frame: np.ndarray) -> None:
        """Encode one ``(height, width, 3)`` uint8 RGB frame.

        Raises
        ------
        Interrupted
            When a signal came during the export (the partial file is removed first).
        """
        import av
        from av.video.reformatter import Colorspace

        rgb = self._frame(check_frame(frame, self.size))
        with self._aborting_on_failure():
            check_interrupt()  # a safe point: between two frames, outside any Qt call
            picture = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            # By name: PyAV before 15 takes the matrix only as a string.
            matrix = Colorspace(self.encoder.matrix).name
            picture = picture.reformat(format=PIXEL_FORMAT, dst_colorspace=matrix)
            picture.pts = self.count
            picture.time_base = 1 / self.rate
            for packet in self._stream.encode(picture):
                self._container.mux(packet)
        self.count += 1

    def commit(self, progress: Progress | None = None) -> Path:
        """Encode the frames the encoder still holds, finish the file and put it in place.

        Raises
        ------
        Interrupted
            When a signal came during the export; the previous file stays and no temporary is left.
        """
        if self.count == 0:
            raise ValueError("no frames to write")
        with self._aborting_on_failure():
            for packet in self._stream.encode(None):
                check_interrupt()  # between encoder writes, before the final rename
                self._container.mux(packet)
            check_interrupt()
            self._container.close()
            self._closed = True
        try:
            return self._file.commit()  # checks for a signal once more, then renames
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop encoding and remove the partial file; an existing video stays as it was."""
        if not self._closed and hasattr(self, "_container"):
            self._closed = True
            with contextlib.suppress(Exception):
                self._container.close()
        self._closed = True
        self._file.abort()
