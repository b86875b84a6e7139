"""Loop description -> the Python source shown to users and the op sequence the engine runs.

Both come out of one walk over the loop description, so every op knows the
source line it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradviz.engine.scenario import LoopSpec, Op, OptimizerSpec, RunSpec
from gradviz.engine.zoo import Phase, Task

INDENT = "    "


@dataclass(frozen=True)
class OpSlot:
    """One op of an iteration: what it does and which source lines it stands for.

    ``again`` counts the backward calls through one forward's graph before this one
    (0 for the first; a loop with ``backwards = 2`` calls it twice).
    """

    phase: str
    op: Op
    micro: int
    line: int
    first: int
    last: int
    again: int = 0

    @property
    def key(self) -> tuple[str, str, int, int]:
        """What identifies the op across runs, for lining runs up side by side."""
        return (self.phase, self.op, self.micro, self.again)


@dataclass(frozen=True)
class Program:
    """The rendered source of one run and the ops of one iteration, in order."""

    source: str
    ops: tuple[OpSlot, ...]

    @property
    def lines(self) -> list[str]:
        return self.source.splitlines()


def optimizer_line(phase: Phase, spec: OptimizerSpec) -> str:
    """The line that builds ``phase``'s optimizer, with its keyword arguments."""
    if spec.kind == "manual":
        return f"lr = {spec.lr:g}"
    args = [f"lr={spec.lr:g}"]
    for k, v in spec.options.items():
        args.append(f"{k}={v!r}")
    return f"{phase.optimizer} = torch.optim.{spec.kind}({phase.param_expr}, {', '.join(args)})"


def _zero_grad_lines(phase: Phase, run: RunSpec) -> list[str]:
    loop = run.loop
    if loop.zero_grad == "manual":
        body = "p.grad = None" if loop.set_to_none else "p.grad.zero_()"
        return [f"for p in {phase.param_expr}:", f"{INDENT}{body}"]
    owner = phase.optimizer if loop.zero_grad == "optimizer" else phase.module
    args = "" if loop.set_to_none else "set_to_none=False"
    return [f"{owner}.zero_grad({args})"]


def _step_lines(phase: Phase, run: RunSpec) -> list[str]:
    if run.optimizer.kind == "manual":
        return [
            "with torch.no_grad():",
            f"{INDENT}for p in {phase.param_expr}:",
            f"{INDENT * 2}p -= lr * p.grad",
        ]
    return [f"{phase.optimizer}.step()"]


def backward_line(phase: Phase, loop: LoopSpec) -> str:
    """The ``backward()`` call as run: with ``retain_graph=True`` where the loop keeps the graph."""
    return f"{phase.loss_var}.backward({'retain_graph=True' if loop.retain_graph else ''})"


def build_program(task: Task, run: RunSpec) -> Program:
    """Render ``run``'s training loop for ``task`` and list the ops of one iteration."""
    loop = run.loop
    lines = ["import torch", ""]
    lines += task.header()
    phases = task.phases()
    lines += [optimizer_line(p, run.optimizer) for p in phases]
    lines += ["", task.loop_head()]
    ops: list[OpSlot] = []

    def emit(body: list[str], indent: str, phase: str, op: Op, micros: range) -> None:
        # A multi-line statement (a manual loop over parameters) is marked at its last line,
        # the one that does the work.
        first = len(lines) + 1
        lines.extend(indent + b for b in body)
        for m in micros:
            ops.append(OpSlot(phase, op, m, len(lines), first, len(lines)))

    k = loop.accumulate
    for phase in phases:
        if len(phases) > 1:
            lines.append(f"{INDENT}# {phase.name}: {phase.loss_var}, {phase.optimizer}")
        order = list(loop.order)
        i = 0
        while i < len(order):
            op = order[i]
            if op == "zero_grad":
                emit(_zero_grad_lines(phase, run), INDENT, phase.name, op, range(1))
            elif op == "step":
                emit(_step_lines(phase, run), INDENT, phase.name, op, range(1))
            elif op == "forward":
                with_backward = i + 1 < len(order) and order[i + 1] == "backward"
                if k > 1:
                    lines.extend(INDENT + b for b in task.chunks_setup_lines(loop))
                    names = [v + "k" for v in task.batch_vars]
                    if names:
                        chunks = ", ".join(f"{v}.chunk({k})" for v in task.batch_vars)
                        lines.append(f"{INDENT}for {', '.join(names)} in zip({chunks}):")
                    else:
                        lines.append(f"{INDENT}for _ in range({k}):")
                    inner = INDENT * 2
                else:
                    names, inner = list(task.batch_vars), INDENT
                fwd_first = len(lines)
                lines.extend(inner + b for b in task.forward_lines(phase, names, loop))
                fwd = (fwd_first + 1, len(lines))
                bwd_lines: list[int] = []
                if with_backward:
                    for _ in range(loop.backwards):
                        lines.append(inner + backward_line(phase, loop))
                        bwd_lines.append(len(lines))
                    i += 1
                for m in range(k):
                    ops.append(OpSlot(phase.name, "forward", m, fwd[1], fwd[0], fwd[1]))
                    for again, b in enumerate(bwd_lines):
                        ops.append(OpSlot(phase.name, "backward", m, b, b, b, again))
            elif op == "backward":
                for again in range(loop.backwards):
                    lines.append(INDENT + backward_line(phase, loop))
                    n = len(lines)
                    ops.append(OpSlot(phase.name, op, 0, n, n, n, again))
            i += 1
    return Program("\n".join(lines) + "\n", tuple(ops))
