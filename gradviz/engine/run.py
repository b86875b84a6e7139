"""One run: a live model and optimizer, stepped one op at a time by real PyTorch calls."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
from torch._utils import _flatten_dense_tensors

from gradviz.engine.loop import OpSlot, build_program
from gradviz.engine.record import Layout, OpRecord, Snapshot
from gradviz.engine.scenario import RunSpec, Scenario
from gradviz.engine.zoo import Batch, Phase, build_task

Mode = Literal["bare", "light", "full"]
EMPTY = np.zeros(0, dtype=np.float32)
EMPTY.flags.writeable = False


def _flat(tensors: list[torch.Tensor]) -> np.ndarray:
    """One copy of many tensors into a new read-only float array (one C++ call, not one per tensor)."""
    if not tensors:
        return EMPTY
    with torch.no_grad():
        flat = _flatten_dense_tensors(tensors)
        # One tensor comes back as a view of itself; the record needs a copy.
        out = (flat.clone() if len(tensors) == 1 else flat).cpu().numpy()
    out.flags.writeable = False
    return out


def _norm(a: np.ndarray) -> float:
    return float(np.sqrt(np.dot(a, a))) if a.size else 0.0


class Run:
    """The live state of one run: its task (model and data), optimizers, and position.

    ``execute`` performs one op exactly as user code would and, in ``full``
    mode, returns an :class:`OpRecord` made of copies of the real tensors.
    """

    def __init__(self, spec: RunSpec, scenario: Scenario, device: torch.device) -> None:
        self.spec = spec
        self.name = spec.name
        self.loop = spec.loop
        self.task = build_task(scenario, device)
        self.phases = {p.name: p for p in self.task.phases()}
        self.program = build_program(self.task, spec)
        self.names = tuple(self.task.params)
        self.tensors = list(self.task.params.values())
        self.layout = Layout(self.names, tuple(tuple(p.shape) for p in self.tensors))
        self._by_id = {id(p): name for name, p in self.task.params.items()}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self._phase_tensors = {
            name: [self.task.params[n] for n in phase.params] for name, phase in self.phases.items()
        }
        if spec.optimizer.kind != "manual":
            cls = getattr(torch.optim, spec.optimizer.kind)
            for name, phase in self.phases.items():
                self.optimizers[phase.optimizer] = cls(
                    self._phase_tensors[name], lr=spec.optimizer.lr, **spec.optimizer.options
                )
        self._fresh: dict[int, torch.Tensor] = {}
        for i, p in enumerate(self.tensors):
            p.register_hook(self._hook(i))
        self._live_loss: dict[str, torch.Tensor] = {}
        self.last_loss: float | None = None
        self.status: Literal["running", "diverged", "error"] = "running"
        self.error: str | None = None
        self.grad_norm = 0.0
        self.param_norm = 0.0
        self.current = self.capture()

    def _hook(self, i: int) -> Any:
        def keep(grad: torch.Tensor) -> None:
            # What this backward delivers to the parameter, before it is added to .grad.
            self._fresh[i] = grad

        return keep

    @property
    def active(self) -> bool:
        return self.status == "running"

    def lrs(self) -> dict[str, float]:
        if not self.optimizers:
            return {"lr": self.spec.optimizer.lr}
        return {name: float(opt.param_groups[0]["lr"]) for name, opt in self.optimizers.items()}

    # ------------------------------------------------------------------ ops
    def _micro_batch(self, iteration: int, micro: int) -> Batch:
        batch = self.task.batch(iteration)
        k = self.loop.accumulate
        if k == 1:
            return batch
        return tuple(t.chunk(k)[micro] for t in batch)

    def _zero_grad(self, phase: Phase) -> None:
        via = self.loop.zero_grad
        if via == "optimizer":
            self.optimizers[phase.optimizer].zero_grad(set_to_none=self.loop.set_to_none)
        elif via == "model":
            self.task.modules[phase.module].zero_grad(set_to_none=self.loop.set_to_none)
        else:
            for p in self._phase_tensors[phase.name]:
                if self.loop.set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()  # type: ignore[union-attr]  # None raises, as in user code

    def _step(self, phase: Phase) -> None:
        if self.optimizers:
            self.optimizers[phase.optimizer].step()
            return
        lr = self.spec.optimizer.lr
        with torch.no_grad():
            for p in self._phase_tensors[phase.name]:
                p -= lr * p.grad  # type: ignore[operator]  # None raises, as in user code

    def _perform(self, slot: OpSlot, iteration: int) -> None:
        phase = self.phases[slot.phase]
        if slot.op == "zero_grad":
            self._zero_grad(phase)
        elif slot.op == "forward":
            batch = self._micro_batch(iteration, slot.micro)
            loss = self.task.loss(phase, batch, iteration, self.loop)
            self._live_loss[phase.name] = loss
            self.last_loss = float(loss.item())
        elif slot.op == "backward":
            loss = self._live_loss.pop(phase.name)
            self._fresh.clear()
            loss.backward()
        else:
            self._step(phase)

    def execute(self, slot: OpSlot, iteration: int, tick: int, index: int, mode: Mode) -> OpRecord | None:
        """Perform ``slot``'s op for real; record it as ``mode`` asks.

        An exception from PyTorch (for example ``p.grad`` being ``None`` in a
        manual loop) stops this run with that error, as it would stop the
        user's program; a non-finite loss or parameter marks it diverged.
        """
        prior = self.current
        try:
            self._perform(slot, iteration)
        except Exception as exc:  # noqa: BLE001 - the user's loop failing is a result to show
            self.status = "error"
            self.error = f"{type(exc).__name__}: {exc}"
            self._live_loss.clear()
        if slot.op == "forward" and self.last_loss is not None and not math.isfinite(self.last_loss):
            self.status = "diverged"
        if mode == "bare":
            if slot.op == "step" and self.status == "running":
                with torch.no_grad():
                    finite = bool(torch.isfinite(_flatten_dense_tensors(self.tensors)).all())
                if not finite:
                    self.status = "diverged"
            return None
        return self._capture_op(slot, iteration, tick, index, mode, prior)

    # ------------------------------------------------------------ recording
    def _grads(self) -> tuple[np.ndarray, tuple[bool, ...]]:
        present = tuple(p.grad is not None for p in self.tensors)
        return _flat([p.grad for p in self.tensors if p.grad is not None]), present

    def _state(self) -> tuple[tuple, np.ndarray, tuple]:
        keys: list[tuple[str, str, tuple[int, ...], str]] = []
        tensors: list[torch.Tensor] = []
        other: list[tuple[str, str, Any]] = []
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                for p in group["params"]:
                    for key, value in opt.state.get(p, {}).items():
                        name = self._by_id[id(p)]
                        if isinstance(value, torch.Tensor):
                            where = "cpu" if value.device.type == "cpu" else "param"
                            keys.append((name, key, tuple(value.shape), f"{value.dtype}@{where}"))
                            tensors.append(value.float())
                        else:
                            other.append((name, key, value))
        return tuple(keys), _flat(tensors), tuple(other)

    def capture(self) -> Snapshot:
        """A full snapshot of this run now, copied from the real tensors."""
        grad_flat, present = self._grads()
        keys, state_flat, other = self._state()
        return Snapshot(
            self.layout, _flat(self.tensors), grad_flat, present, keys, state_flat, other, self.lrs(), self.last_loss
        )

    def _capture_op(
        self, slot: OpSlot, iteration: int, tick: int, index: int, mode: Mode, prior: Snapshot
    ) -> OpRecord | None:
        op = slot.op
        fresh_flat = fresh_present = None
        if mode == "light":
            if op in ("zero_grad", "backward"):
                grads = [p.grad for p in self.tensors if p.grad is not None]
                self.grad_norm = _torch_norm(grads)
            elif op == "step":
                self.param_norm = _torch_norm(self.tensors)
                if not math.isfinite(self.param_norm):
                    self.status = "diverged"
            return None
        snap = prior
        if op in ("zero_grad", "backward"):
            grad_flat, present = self._grads()
            self.grad_norm = _norm(grad_flat)
            snap = Snapshot(
                prior.layout, prior.param_flat, grad_flat, present, prior.state_keys, prior.state_flat,
                prior.state_other, prior.lr, self.last_loss,
            )  # fmt: skip
            if op == "backward":
                fresh_present = tuple(i in self._fresh for i in range(len(self.tensors)))
                fresh_flat = _flat([self._fresh[i] for i in range(len(self.tensors)) if i in self._fresh])
        elif op == "step":
            params = _flat(self.tensors)
            self.param_norm = _norm(params)
            if not np.isfinite(params).all():
                self.status = "diverged"
            keys, state_flat, other = self._state()
            snap = Snapshot(
                prior.layout, params, prior.grad_flat, prior.grad_present, keys, state_flat, other,
                self.lrs(), self.last_loss,
            )  # fmt: skip
        elif op == "forward":
            snap = Snapshot(
                prior.layout, prior.param_flat, prior.grad_flat, prior.grad_present, prior.state_keys,
                prior.state_flat, prior.state_other, prior.lr, self.last_loss,
            )  # fmt: skip
        self.current = snap
        item = 4  # bytes per float32
        memory = {
            "params": prior.layout.total * item,
            "grads": snap.grad_flat.size * item,
            "state": snap.state_flat.size * item,
        }
        return OpRecord(
            run=self.name,
            index=index,
            tick=tick,
            iteration=iteration,
            micro=slot.micro,
            phase=slot.phase,
            op=op,
            line=slot.line,
            lines=(slot.first, slot.last),
            loss=self.last_loss,
            diverged=self.status == "diverged",
            error=self.error,
            snapshot=snap,
            fresh_flat=fresh_flat,
            fresh_present=fresh_present,
            prior=prior if op == "backward" else None,
            memory=memory,
        )

    # -------------------------------------------------------------- restore
    def restore(self, snap: Snapshot) -> None:
        """Put this run back into the state ``snap`` was copied from (at an iteration start)."""
        device = self.tensors[0].device
        with torch.no_grad():
            for p, value in zip(self.tensors, snap.params.values(), strict=True):
                p.copy_(torch.from_numpy(value.copy()).to(device))
        for p, g in zip(self.tensors, snap.grads.values(), strict=True):
            p.grad = None if g is None else torch.from_numpy(g.copy()).to(device)
        params = {name: p for name, p in self.task.params.items()}
        for opt in self.optimizers.values():
            opt.state.clear()
        owner = {id(p): opt for opt in self.optimizers.values() for g in opt.param_groups for p in g["params"]}
        state = snap.state
        dtypes = {(k[0], k[1]): k[3] for k in snap.state_keys}
        for pname, entries in state.items():
            p = params[pname]
            for key, value in entries.items():
                if isinstance(value, np.ndarray):
                    dtype_name, where = dtypes[(pname, key)].split("@")
                    dtype = getattr(torch, dtype_name.removeprefix("torch."))
                    t = torch.from_numpy(value.copy()).to(dtype)
                    owner[id(p)].state[p][key] = t if where == "cpu" else t.to(device)
                else:
                    owner[id(p)].state[p][key] = value
        for name, opt in self.optimizers.items():
            for group in opt.param_groups:
                group["lr"] = snap.lr[name]
        self._live_loss.clear()
        self._fresh.clear()
        self.last_loss = snap.loss
        self.status = "running"
        self.error = None
        self.grad_norm = _norm(snap.grad_flat)
        self.param_norm = _norm(snap.param_flat)
        self.current = snap


def _torch_norm(tensors: list[torch.Tensor]) -> float:
    if not tensors:
        return 0.0
    with torch.no_grad():
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors))))
