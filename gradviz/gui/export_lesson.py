"""A lesson as an export plays it: the ops up to each stop, its question held, then the reveal.

Qt-free: the shots are data that :mod:`gradviz.gui.export_frames` draws. A stop
with questions is shown just before its op with the questions and their
choices on a card over the views, held for :data:`QUESTION_SECONDS`; then its op
is performed and the card shows the answer, why each wrong choice is wrong and
the real numbers (from :func:`gradviz.engine.quiz.reveal`), held for
:data:`REVEAL_SECONDS`. Every frame shows nothing after its moment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradviz.engine.lesson import Claim, Question, Stop
    from gradviz.engine.quiz import PlacedStop, Reveal

QUESTION_SECONDS = 5.0
REVEAL_SECONDS = 7.0
# A stop without questions: its caption is read over the moment after its op.
CAPTION_SECONDS = 3.0

# The views that show what a question reads: the inspector holds every parameter's value and
# .grad and the readouts of lr, memory and autograd; the surface where the weights are and the
# loss; the timeline the loss.
READ_VIEWS = {
    "grad": ("grads",),
    "fresh": ("grads",),
    "stale": ("grads",),
    "value": ("grads", "surface"),
    "lr": ("grads",),
    "saved": ("grads",),
    "nodes": ("grads",),
    "loss": ("surface", "timeline"),
}
# And what a claim's verb (or, for `changed` and `same`, what it compares) is seen in.
CLAIM_VIEWS = {
    "moved": ("grads", "surface"),
    "weights": ("grads", "surface"),
    "raised": ("code",),
}


@dataclass(frozen=True)
class Shot:
    """One moment of a lesson export.

    Attributes
    ----------
    tick:
        The tick shown (the moment after the op there; -1 before the first op).
    hold:
        How many frames it is held.
    card:
        Rich text over the views (a question or a reveal); empty for none.
    caption:
        The sentence over the frame; None for the narration of the op.
    part:
        ``(k, n)``: a frame within the backward at ``tick``, with the first ``k``/``n`` of its
        nodes run; None for the moment after the op.
    reads:
        The views that show what the card asks about (:func:`stop_views`): the card keeps clear of them.
    """

    tick: int
    hold: int = 1
    card: str = ""
    caption: str | None = None
    part: tuple[int, int] | None = None
    reads: frozenset[str] = frozenset()


def _claim_views(claim: Claim) -> set[str]:
    if claim.verb == "all":
        return {v for part in claim.parts for v in _claim_views(part)}
    key = claim.target if claim.verb in ("changed", "same") and isinstance(claim.target, str) else claim.verb
    return set(CLAIM_VIEWS.get(key, ("grads",)))


def stop_views(stop: Stop) -> frozenset[str]:
    """The views in which a stop's questions and their reveals can be seen: always the code's line."""
    views = {"code"}
    for q in stop.questions:
        if q.read is not None:
            views |= set(READ_VIEWS.get(q.read.quantity, ("grads",)))
        for choice in q.choices:
            views |= _claim_views(choice.claim)
    if "surface" in views:
        views.add("surface3d")  # the same surface, in 3-D
    return frozenset(views)


def _frames(seconds: float, fps: float) -> int:
    return max(1, round(seconds * fps))


def _text(value: str) -> str:
    return escape(value, quote=False)


def question_card(number: int, count: int, questions: Sequence[Question]) -> str:
    """The card of a stop's questions: each question and its labelled choices."""
    parts = [f"<b>Stop {number} of {count}: predict before the next op runs</b>"]
    for i, q in enumerate(questions, start=1):
        head = f"Q{i}. " if len(questions) > 1 else ""
        parts.append(f"<p style='margin-top:6px'><b>{head}{_text(q.ask)}</b></p>")
        if q.kind == "number":
            parts.append("<p>Answer with a number.</p>")
        else:
            rows = "<br>".join(
                f"<b>{label})</b> {_text(c.text)}" for label, c in zip(q.labels, q.choices, strict=True)
            )
            parts.append(f"<p>{rows}</p>")
    return "".join(parts)


def reveal_card(number: int, count: int, questions: Sequence[Question], reveals: Sequence[Reveal]) -> str:
    """The card of a stop's reveals: the answer, why each wrong choice is wrong, the real numbers."""
    parts = [f"<b>Stop {number} of {count}: what PyTorch did</b>"]
    for i, (q, r) in enumerate(zip(questions, reveals, strict=True), start=1):
        head = f"Q{i}. " if len(questions) > 1 else ""
        parts.append(f"<p style='margin-top:6px'><b>{head}Answer: {_text(r.answer)}</b></p>")
        wrong = [
            f"<b>{q.labels[j]})</b> {_text(c.explain)}"
            for j, c in enumerate(q.choices)
            if j not in r.correct and c.explain
        ]
        if wrong:
            parts.append("<p>" + "<br>".join(wrong) + "</p>")
        if r.facts:
            facts = "; ".join(_text(f) for f in r.facts)
            parts.append(f"<p>In the real run: {facts}{'' if facts.endswith('.') else '.'}</p>")
    return "".join(parts)


def lesson_ticks(stops: Sequence[PlacedStop]) -> int:
    """The last tick a lesson export performs: its last stop's op."""
    return max(p.tick for p in stops)


def lesson_shots(
    stops: Sequence[PlacedStop],
    snap: Callable[[int], int],
    reveals: Callable[[int], Sequence[Reveal]],
    fps: float,
) -> list[Shot]:
    """Every shot of a lesson export, in order.

    Parameters
    ----------
    stops:
        The lesson's stops on the lab's ticks (``LabInfo.stops``).
    snap:
        The tick of the last op at or before a tick (``WindowHistory.snap``): one frame per op played.
    reveals:
        The reveals of stop ``i``'s questions, computed from the real run.
    fps:
        Frames per second, which sets how many frames a card is held.
    """
    shots: list[Shot] = [Shot(-1)]
    shown = -1
    count = len(stops)

    def play(until: int) -> None:
        nonlocal shown
        for tick in sorted({snap(t) for t in range(shown + 1, until + 1)} - {shown}):
            shots.append(Shot(tick))
        shown = max(shown, until)

    for i, placed in enumerate(stops):
        stop: Any = placed.stop
        number = i + 1
        caption = stop.caption
        if stop.questions:
            play(placed.tick - 1)
            asked = question_card(number, count, stop.questions)
            reads = stop_views(stop)
            shots.append(
                Shot(snap(placed.tick - 1), _frames(QUESTION_SECONDS, fps), asked, caption, reads=reads)
            )
            shown = max(shown, placed.tick)  # the stop's op: shown with its reveal
            shown_card = reveal_card(number, count, stop.questions, reveals(i))
            shots.append(
                Shot(snap(placed.tick), _frames(REVEAL_SECONDS, fps), shown_card, caption, reads=reads)
            )
        else:
            play(placed.tick - 1)
            shown = max(shown, placed.tick)
            shots.append(Shot(snap(placed.tick), _frames(CAPTION_SECONDS, fps), "", caption))
    return shots
