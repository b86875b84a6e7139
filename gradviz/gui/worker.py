"""The one thread that owns the live lab and performs its PyTorch ops.

Every request (build, step, reset, fetch) arrives as a queued signal and is
answered with a signal carrying immutable data: records of numpy copies, never
tensors. torch is first imported here, after the window is on screen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot

from gradviz.gui.tape import Entry, LabInfo, RunInfo, StepResult

if TYPE_CHECKING:
    from gradviz.engine.lab import Lab
    from gradviz.engine.scenario import Scenario


def validated(scenario: Scenario) -> Scenario:
    """Check an edited scenario as strictly as a file: write it as TOML and read it back."""
    from dataclasses import replace

    from gradviz.engine.scenario import dumps_scenario, loads_scenario

    where = str(scenario.path or scenario.name)
    return replace(loads_scenario(dumps_scenario(scenario), where, scenario.name), path=scenario.path)


def _ghost_lines(run: Any, restore: tuple[str, ...] | None) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """Where the zero_grad lines a run skips would stand, rendered by the same loop renderer."""
    import difflib
    from dataclasses import replace

    from gradviz.engine.loop import build_program

    loop = run.spec.loop
    if "zero_grad" in loop.order:
        return ()
    order = restore if restore and "zero_grad" in restore else ("zero_grad", *loop.order)
    alt = build_program(run.task, replace(run.spec, loop=replace(loop, order=tuple(order))))
    old, new = run.program.lines, alt.lines
    out = []
    for tag, i1, _i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "insert":
            out.append((i1, tuple(new[j1:j2])))
    return tuple(out)


class LabWorker(QObject):
    """Owns one :class:`~gradviz.engine.lab.Lab` at a time; lives on the worker thread."""

    built = Signal(object, int)
    stepped = Signal(object, int)
    was_reset = Signal(int)
    fetched = Signal(object, int)
    failed = Signal(str, int)

    def __init__(self) -> None:
        super().__init__()
        self.lab: Lab | None = None
        self.info: LabInfo | None = None
        self.generation = -1
        self._known: dict[str, int] = {}

    # --------------------------------------------------------------- build
    @Slot(object, int, int, object)
    def build(self, source: Any, generation: int, until_tick: int, restore: Any) -> None:
        """Load ``source`` (a name, a path or a Scenario), build its lab, step to ``until_tick``.

        ``restore`` maps run names to the loop order that re-enabling zero_grad gives
        (the code panel shows those lines greyed out where they would go).
        """
        from gradviz.engine.errors import UserError

        try:
            self._build(source, restore or {})
        except UserError as exc:
            self.failed.emit(str(exc), generation)
            return
        except Exception as exc:
            self.failed.emit(f"The scenario could not be built ({type(exc).__name__}: {exc}).", generation)
            return
        # Only a lab that was built replaces the one the controller is stepping.
        self.generation = generation
        self.built.emit(self.info, generation)
        if until_tick >= 0:
            self.step(until_tick, generation)

    def _build(self, source: Any, restore: dict[str, tuple[str, ...]]) -> None:
        from gradviz.engine.devices import device_status
        from gradviz.engine.lab import Lab, parameter_count, set_threads
        from gradviz.engine.scenario import Scenario, load_scenario
        from gradviz.engine.surface import surface_model

        # One intra-op thread: faster for small models and leaves a core to the GUI.
        set_threads(1)
        scenario = validated(source) if isinstance(source, Scenario) else load_scenario(str(source))
        lab = Lab(scenario)
        self.lab = lab
        self._known = {r.name: 0 for r in lab.runs}
        runs = tuple(
            RunInfo(
                name=r.name,
                note=r.spec.note,
                source=r.program.source,
                ops=r.program.ops,
                names=r.layout.names,
                shapes=r.layout.shapes,
                spec=r.spec,
                ghost=_ghost_lines(r, restore.get(r.name)),
            )
            for r in lab.runs
        )
        self.info = LabInfo(
            scenario=scenario,
            runs=runs,
            ticks_per_iteration=lab.ticks_per_iteration,
            schedule=tuple(tuple(row) for row in lab.schedule),
            device=str(lab.device),
            devices=device_status(),
            surface=surface_model(lab),
            full_records=lab.mode == "full",
            initial={r.name: lab.initial(r.name) for r in lab.runs},
            parameter_count=parameter_count(lab),
        )

    # ---------------------------------------------------------------- step
    @Slot(int, int)
    def step(self, until_tick: int, generation: int) -> None:
        """Perform one tick (``until_tick < 0``) or every tick up to ``until_tick``."""
        lab = self.lab
        if lab is None or generation != self.generation:
            return
        distance: list[tuple[int, tuple[float, ...]]] = []
        try:
            while not lab.stopped:
                lab.step()
                distance.append((lab.tick - 1, self._distances()))
                if until_tick < 0 or lab.tick > until_tick:
                    break
            result = self._result(distance)
        except Exception as exc:
            self.failed.emit(f"The op failed inside gradviz ({type(exc).__name__}: {exc}).", generation)
            return
        self.stepped.emit(result, generation)

    def _distances(self) -> tuple[float, ...]:
        import torch

        assert self.lab is not None
        runs = self.lab.runs
        with torch.no_grad():
            base = torch.cat([p.detach().reshape(-1).double() for p in runs[0].tensors])
            return tuple(
                float(
                    torch.linalg.vector_norm(
                        torch.cat([p.detach().reshape(-1).double() for p in r.tensors]) - base
                    )
                )
                for r in runs[1:]
            )

    def _result(self, distance: list[tuple[int, tuple[float, ...]]]) -> StepResult:
        from gradviz.engine.surface import preview_step

        lab = self.lab
        info = self.info
        assert lab is not None and info is not None
        tpi = lab.ticks_per_iteration
        entries: dict[str, tuple[Entry, ...]] = {}
        previews = {}
        for r, run in enumerate(lab.runs):
            h = lab.history[run.name]
            new = []
            for i in range(self._known[run.name], len(h)):
                tick = h.ticks[i]
                slot = lab.schedule[tick % tpi][r]
                rec = h.records[i] if h.keep_records else None
                if rec is not None:
                    status = "error" if rec.error else ("diverged" if rec.diverged else "running")
                else:
                    status = run.status if i == len(h) - 1 else "running"
                new.append(
                    Entry(
                        tick=tick,
                        op=slot.op if slot else "forward",
                        line=slot.line if slot else 0,
                        loss=h.loss[i],
                        grad_norm=h.grad_norm[i],
                        param_norm=h.param_norm[i],
                        status=status,
                        record=rec,
                    )
                )
            self._known[run.name] = len(h)
            entries[run.name] = tuple(new)
            if info.surface is not None and run.active:
                nxt = lab.schedule[lab.tick % tpi][r]
                if nxt is not None and nxt.op == "step":
                    preview = preview_step(run)
                    if preview is not None:
                        previews[run.name] = preview
        return StepResult(
            entries=entries,
            distance=tuple(distance),
            errors={r.name: r.error for r in lab.runs},
            preview_tick=lab.tick - 1,
            previews=previews,
            stopped=lab.stopped,
        )

    # --------------------------------------------------------------- reset
    @Slot(int)
    def reset(self, generation: int) -> None:
        """Go back to the start of the lab (the same initial weights and batches)."""
        if self.lab is None or generation != self.generation:
            return
        self.lab.seek(-1)
        self._known = {r.name: 0 for r in self.lab.runs}
        self.was_reset.emit(generation)

    # --------------------------------------------------------------- fetch
    @Slot(object, int)
    def fetch(self, keys: Any, generation: int) -> None:
        """Rebuild full records (run name, op index) that a large model keeps only as scalars."""
        lab = self.lab
        if lab is None or generation != self.generation:
            return
        out = {}
        for run, index in keys:
            if index < len(lab.history[run]):
                out[(run, index)] = lab.record(run, index)
        self.fetched.emit(out, generation)
