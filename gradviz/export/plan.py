"""Which moments an export shows: the range of ops or iterations, checked before anything runs.

Ops and iterations are counted from 1 as the window's status bar counts them;
``first = 0`` adds the state before the first op. A frame of op ``k`` shows the
moment just after tick ``k - 1``; a frame of iteration ``k`` the moment after
its last op.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradviz.engine.errors import UserError

PER_FRAME = ("op", "iteration")
# More frames than this is a typo rather than a slide (a GIF of 10,000 frames runs for minutes).
MAX_FRAMES = 10_000


@dataclass(frozen=True)
class FramePlan:
    """The frames of an export.

    Attributes
    ----------
    per_frame:
        ``"op"`` or ``"iteration"``.
    first, last:
        The first and last op (or iteration) shown, counted from 1; ``first`` 0 is the start.
    ticks_per_iteration:
        Ticks of one iteration of the lab.
    """

    per_frame: str
    first: int
    last: int
    ticks_per_iteration: int

    def tick_of(self, number: int) -> int:
        """The moment (tick) after op or iteration ``number``; -1 for 0, the start."""
        if number <= 0:
            return -1
        return number - 1 if self.per_frame == "op" else number * self.ticks_per_iteration - 1

    def ticks(self) -> list[int]:
        """The tick of every frame, in order."""
        return [self.tick_of(n) for n in range(self.first, self.last + 1)]

    def __len__(self) -> int:
        return self.last - self.first + 1


def plan_frames(
    ticks_per_iteration: int,
    *,
    per_frame: str = "op",
    first: int | None = None,
    last: int | None = None,
    ops: int | None = None,
    iterations: int | None = None,
    default_iterations: int = 1,
) -> FramePlan:
    """The frames for the command line's range options.

    Parameters
    ----------
    ticks_per_iteration:
        Ticks of one iteration of the lab.
    per_frame:
        One frame per ``"op"`` or per ``"iteration"``.
    first, last:
        ``--from`` and ``--to``, in the unit of ``per_frame`` (default: 1 and the end).
    ops, iterations:
        ``--ops`` or ``--iterations``: how far the run goes (default: the scenario's iterations).
    default_iterations:
        The scenario's own number of iterations.

    Raises
    ------
    UserError
        For an empty or reversed range, or one past the requested length.
    """
    if per_frame not in PER_FRAME:
        raise UserError(f"--per-frame must be op or iteration, not {per_frame!r}.")
    if ops is not None and iterations is not None:
        raise UserError("Give --ops or --iterations, not both.")
    unit = "op" if per_frame == "op" else "iteration"
    tpi = ticks_per_iteration
    if ops is not None:
        length, given = (ops if per_frame == "op" else ops // tpi), f"--ops {ops}"
    elif iterations is not None:
        length, given = (iterations * tpi if per_frame == "op" else iterations), f"--iterations {iterations}"
    else:
        length = default_iterations * tpi if per_frame == "op" else default_iterations
        given = f"the scenario's {default_iterations} iterations"
    start = 1 if first is None else first
    if start < 0:
        raise UserError(f"--from must be 0 (the start) or more, not {start}.")
    if last is None:
        if length < 1:
            raise UserError(f"{given} is less than one iteration ({tpi} ops); export per op or run longer.")
        end = length
        if start > end:
            raise UserError(f"--from {start} is past the end: {given} make {length} {unit}s.")
    else:
        end = last
        if (ops is not None or iterations is not None) and end > length:
            raise UserError(f"--to {end} is past the end: {given} make {length} {unit}s.")
    if start > end:
        raise UserError(f"--from {start} is after --to {end}; give a range with --from at most --to.")
    count = end - start + 1
    if count > MAX_FRAMES:
        raise UserError(
            f"That range makes {count:,} frames; exports hold at most {MAX_FRAMES:,}: narrow --from/--to."
        )
    return FramePlan(per_frame, start, end, tpi)
