"""Narration and the inspector's readouts cite what autograd did: its error, saved bytes, graph size."""

from __future__ import annotations

from gradviz.engine import Lab, load_scenario
from gradviz.gui.narration import narrate
from gradviz.gui.views.grads import readout_text
from gradviz.gui.window_history import Entry, Moment, StepResult, WindowHistory, describe_lab


def _moment(name: str, ticks: int) -> Moment:
    lab = Lab(load_scenario(name))
    info = describe_lab(lab)
    history = WindowHistory(info)
    for _ in range(ticks):
        lab.step()
    entries = {}
    for r in lab.runs:
        h = lab.history[r.name]
        entries[r.name] = tuple(
            Entry(h.ticks[i], h.records[i].op, h.records[i].line, h.loss[i], h.grad_norm[i], h.param_norm[i],
                  "running", h.records[i])
            for i in range(len(h))
        )  # fmt: skip
    history.extend(StepResult(entries, (), {}, -2, {}, False))
    return Moment(info, history, history.last_tick)


def test_a_second_backward_is_narrated_with_pytorchs_first_sentence():
    moment = _moment("backward-twice", 4)  # zero_grad, forward, backward, backward
    text = narrate(moment, "no-retain")
    assert text.startswith("no-retain: the loop raised RuntimeError: Trying to backward through the graph")
    assert text.endswith("as it would in your program; this run stops here.")
    assert "Specify retain_graph=True" not in text  # the rest of PyTorch's message stays in the records
    assert narrate(moment, "retain") == (
        "retain: backward() added -10 to weight.grad; weight.grad now holds the sum of 2 backward calls "
        "because the loop calls backward() again through the same graph, kept by retain_graph=True."
    )


def test_tbptt_backward_narration_and_readouts_give_the_graphs_length():
    moment = _moment("rnn-tbptt", 5)  # ... the second chunk's backward
    walked = {r: moment.op_record(r).footprint.nodes for r in ("detach", "keep", "retain")}
    assert walked["detach"] < walked["retain"] == walked["keep"]
    for run in ("detach", "retain"):
        assert narrate(moment, run).startswith(f"{run}: backward() walked {walked[run]} autograd nodes")
    readout = readout_text(moment)
    for nodes in walked.values():
        assert f"backward() walked {nodes} nodes" in readout


def test_virtual_batch_forward_narration_and_readouts_give_the_saved_bytes():
    moment = _moment("virtual-batch", 2)  # zero_grad, the first forward of each run
    saved = {r: moment.op_record(r).footprint.saved for r in ("one-batch", "micro-batches")}
    assert saved["one-batch"] == 4 * saved["micro-batches"] > 0
    assert f"saving {saved['one-batch']:,} bytes for backward" in narrate(moment, "one-batch")
    readout = readout_text(moment)
    assert all(f"saved for backward {n:,} B" in readout for n in saved.values())


def test_scenarios_whose_lesson_does_not_lead_with_memory_measure_nothing():
    moment = _moment("standard-loop", 2)
    rec = moment.op_record(moment.run_names()[0])
    assert rec.footprint is None
    assert "saving" not in narrate(moment)
