"""Cost of the autograd graph capture per op, against the same lab without it.

Labs of one scenario step side by side, in turns of random order (machines
here are shared and noisy; each figure is the median over rounds of the ratio
within a round; times are the thread's CPU time, which leaves out the waits for a
core that a shared machine adds to the wall clock, and everything runs on this thread):

- ``peer``: each run's ``_perform`` as it was before the graph observer existed
  (no check at all), bound to the run;
- ``off``: the shipped code with no observer set (what every lab pays);
- ``on``: what the app pays while a graph view is open at full-speed Play: a
  :class:`~gradviz.engine.graph.GraphCapture` on every run as the worker sets it (values up
  to ``VIEW_VALUES`` elements, graphs made only when asked for), and each run's newest
  graph made once per frame's batch of ops, as the worker makes it. A frame's batch is
  the ops the engine steps in ``FRAME_S`` with the capture on (measured first, printed);
- ``every``: the same capture with every forward's and backward's graph made after its
  op (stepping one op at a time; what full-speed Play cost before graphs were made on demand);
- ``hooks``: the peer plus the least any capture through autograd's node hooks pays to hear
  PyTorch's own execution order and the gradients that flowed: a walk of ``next_functions``
  from the loss that finds each node of the backward's graph, and one no-op post hook on each
  (the capture's own kind of hook: it fires right after the node ran and sees what it received
  and sent). Each forward builds new nodes, so each backward's are found and hooked anew; the
  hooks go with the graph, never removed, as the capture leaves them. A capture cannot learn
  the order or the gradients with less, so this is its floor, read against the same peer
  (the capture itself keeps its hook on each parameter's ``AccumulateGrad`` node from one
  iteration to the next, so its registrations are fewer than the floor's).

Run: ``python bench/bench_graph.py [--iterations N] [--rounds R]``; on a busy machine short turns
(``--iterations 10 --rounds 41``) keep a round's labs close in time, and the ratios steady.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import LINEAR, MLP

from gradviz.engine.footprint import graph_nodes
from gradviz.engine.graph import VIEW_VALUES, GraphCapture
from gradviz.engine.lab import Lab, set_threads
from gradviz.engine.loop import OpSlot
from gradviz.engine.run import Run
from gradviz.engine.scenario import Scenario, load_builtin, loads_scenario

TARGET = 1.10
FRAME_S = 1 / 60  # a frame at 60 Hz


def _perform_without_observer(self: Run, slot: OpSlot, iteration: int, measure: bool = False) -> None:
    """``Run._perform`` without the observer's two checks: the peer."""
    phase = self.phases[slot.phase]
    if slot.op == "zero_grad":
        self._zero_grad(phase)
    elif slot.op == "forward":
        batch = self._micro_batch(iteration, slot.micro)
        if slot.micro == 0:
            self.task.start_batch()
        if self.measures and self._count_saved:
            with self._saved.hooks(self.tensors):
                loss = self.task.loss(phase, batch, iteration, self.loop)
        else:
            loss = self.task.loss(phase, batch, iteration, self.loop)
        self._live_loss[phase.name] = loss
        self.last_loss = float(loss.item())
    elif slot.op == "backward":
        last = slot.again == self.loop.backwards - 1
        loss = self._live_loss.pop(phase.name) if last else self._live_loss[phase.name]
        self._fresh.clear()
        if measure:
            self._walked = graph_nodes(loss)
        loss.backward(retain_graph=self.loop.retain_graph)
    else:
        self._step(phase)


def _noop(*_: object) -> None:
    return None


def _hook_every_node(loss: object) -> None:
    """A no-op post hook on every node reachable from ``loss``, found by a walk of ``next_functions``."""
    root = loss.grad_fn  # type: ignore[attr-defined]
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        node.register_hook(_noop)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)


def _perform_with_bare_hooks(self: Run, slot: OpSlot, iteration: int, measure: bool = False) -> None:
    """The peer, with every node of each backward found and hooked by a no-op: the floor of a capture."""
    if slot.op != "backward":
        _perform_without_observer(self, slot, iteration, measure)
        return
    phase = self.phases[slot.phase]
    last = slot.again == self.loop.backwards - 1
    loss = self._live_loss.pop(phase.name) if last else self._live_loss[phase.name]
    self._fresh.clear()
    _hook_every_node(loss)
    loss.backward(retain_graph=self.loop.retain_graph)


def _make_newest(lab: Lab) -> None:
    """What the worker does once per step request: make each run's newest graph."""
    for run in lab.runs:
        run.graph_observer.newest()  # type: ignore[union-attr]


def _turn(lab: Lab, iterations: int, make: int) -> None:
    """Step ``iterations`` iterations tick by tick, as the worker does; with ``make``, each run's newest
    graph is made after every ``make`` ops and at the end."""
    end = (lab.iteration + iterations) * lab.ticks_per_iteration
    ops = 0
    while lab.tick < end and not lab.stopped:
        ops += len(lab.advance(end))
        if make and ops >= make:
            _make_newest(lab)
            ops = 0
    if make:
        _make_newest(lab)


def frame_ops(scenario: Scenario, iterations: int) -> int:
    """The ops the engine steps in ``FRAME_S`` with the capture on: a frame's batch at full-speed Play."""
    lab = Lab(scenario)
    for run in lab.runs:
        run.graph_observer = GraphCapture(values=VIEW_VALUES, lazy=True)
    lab.run_iterations(5)
    start = time.thread_time()
    _turn(lab, iterations, 10**9)
    per_op = (time.thread_time() - start) / (iterations * sum(len(r.program.ops) for r in lab.runs))
    return max(1, round(FRAME_S / per_op))


def measure(scenario: Scenario, iterations: int, rounds: int) -> dict[str, float]:
    batch = frame_ops(scenario, iterations)
    names = ("peer", "off", "on", "every", "hooks")
    labs = {name: Lab(scenario) for name in names}
    make = {"on": batch, "every": 1}
    for run in labs["peer"].runs:
        run._perform = types.MethodType(_perform_without_observer, run)  # type: ignore[method-assign]
    for run in labs["hooks"].runs:
        run._perform = types.MethodType(_perform_with_bare_hooks, run)  # type: ignore[method-assign]
    for name in make:
        for run in labs[name].runs:
            run.graph_observer = GraphCapture(values=VIEW_VALUES, lazy=True)
    for lab in labs.values():
        lab.run_iterations(5)  # optimizer state made, first calls out of the way
    stopped = [f"{name}/{r.name}: {r.error}" for name, lab in labs.items() for r in lab.runs if r.error]
    if stopped:  # a peer that fails would time nothing
        raise SystemExit(f"{scenario.name}: a run stopped: {'; '.join(stopped)}")
    times: dict[str, list[float]] = {name: [] for name in labs}
    for _ in range(rounds):
        order = list(labs)
        random.shuffle(order)
        for name in order:
            lab = labs[name]
            if lab.iteration + iterations > scenario.iterations:
                lab.seek(-1)  # back to the start: the history stays bounded
            start = time.thread_time()
            _turn(lab, iterations, make.get(name, 0))
            times[name].append(time.thread_time() - start)
    ops = iterations * sum(len(r.program.ops) for r in labs["peer"].runs)
    out = {f"{name}_us": statistics.median(t) / ops * 1e6 for name, t in times.items()}
    for name in names[1:]:
        out[name] = statistics.median(a / b for a, b in zip(times[name], times["peer"], strict=True))
    out["batch"] = batch
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50, help="iterations per turn (default 50)")
    parser.add_argument("--rounds", type=int, default=15, help="turns of each lab (default 15)")
    args = parser.parse_args()
    set_threads(1)
    scenarios = {
        "linear": loads_scenario(LINEAR, "bench"),
        "mlp-17k": loads_scenario(MLP, "bench"),
        "gan-detach": load_builtin("gan-detach"),
    }
    print(f"per op, {args.rounds} rounds of {args.iterations} iterations; ratios against the peer")
    print(
        f"{'scenario':<12} {'peer us':>8} {'off us':>8} {'on us':>8} {'ops/frame':>9} {'off/peer':>9}"
        f" {'on/peer':>8} {'every/peer':>11} {'hooks/peer':>11}"
    )
    worst = worst_on = worst_every = floor = 0.0
    for name, sc in scenarios.items():
        sc = sc.with_overrides(iterations=max(sc.iterations, 10 * args.iterations), device="cpu")
        m = measure(sc, args.iterations, args.rounds)
        worst = max(worst, m["off"])
        worst_on = max(worst_on, m["on"])
        worst_every = max(worst_every, m["every"])
        floor = max(floor, m["hooks"])
        print(
            f"{name:<12} {m['peer_us']:>8.1f} {m['off_us']:>8.1f} {m['on_us']:>8.1f} {m['batch']:>9.0f} "
            f"{m['off']:>9.3f} {m['on']:>8.2f} {m['every']:>11.2f} {m['hooks']:>11.2f}"
        )
    verdict = "within" if worst <= TARGET else "OVER"
    print(f"no observer set: worst {worst:.3f}x the peer, {verdict} the target of {TARGET:.2f}x")
    verdict = "within" if worst_on <= TARGET else "OVER"
    print(
        f"graph view open, full-speed Play (newest graph made once a frame): worst {worst_on:.2f}x the peer, "
        f"{verdict} the target of {TARGET:.2f}x"
    )
    print(f"every graph made after its op: worst {worst_every:.2f}x")
    print(
        "the walk and a no-op post hook on every node (the floor of a capture by node hooks): "
        f"worst {floor:.2f}x"
    )


if __name__ == "__main__":
    main()
