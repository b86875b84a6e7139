"""Qt-free parts of the GUI: number formatting, edits of scenarios, narration, the history."""

from __future__ import annotations

import math

import numpy as np

from gradviz.engine import Lab, load_scenario
from gradviz.gui import edits, fmt
from gradviz.gui.narration import narrate
from gradviz.gui.window_history import Moment, StepResult, WindowHistory, describe_lab, entries_since
from gradviz.gui.worker import validated


def test_numbers_never_show_none_as_zero() -> None:
    assert fmt.number(None) == "None"
    assert fmt.array(None) == "None"
    assert fmt.number(0.0) == "0"
    assert fmt.number(math.inf) == "inf" and fmt.number(-math.inf) == "-inf" and fmt.number(math.nan) == "nan"
    assert fmt.number(1e30) == "1e30"
    assert fmt.signed(0.25) == "+0.25"
    assert fmt.array(np.zeros(100)).startswith("100 values")


def test_a_large_tensor_is_summed_up_by_the_norm_of_its_finite_elements() -> None:
    values = np.arange(1, 17_001, dtype=np.float32)
    norm = float(np.linalg.norm(values.astype(np.float64)))
    assert fmt.array(values) == f"17000 values, norm {fmt.number(norm, 3)}"
    spoiled = values.copy()
    spoiled[[3, 900]] = [np.nan, -np.inf]
    rest = np.delete(values, [3, 900]).astype(np.float64)
    assert fmt.finite_norm(spoiled) == float(np.sqrt(rest.dot(rest)))
    assert fmt.finite_norm(np.array([np.nan, np.inf], np.float32)) is None
    assert fmt.array(np.full(9, np.nan, np.float32)) == "9 values, none finite"


def test_a_vectors_histogram_counts_as_numpys_does() -> None:
    from gradviz.gui.views.grads import histogram

    rng = np.random.default_rng(3)
    for size in (2, 17, 1000, 16_384):
        for scale in (1e-7, 1.0, 1e7):
            values = rng.standard_normal(size) * scale
            np.testing.assert_array_equal(histogram(values, 24), np.histogram(values, bins=24)[0])
    same = np.full(5, 2.5)
    np.testing.assert_array_equal(histogram(same, 24), np.histogram(same, bins=24)[0])


def test_edits_round_trip_through_validation() -> None:
    sc = load_scenario("forgot-zero-grad")
    on = validated(edits.set_zero_grad(sc, "yours", True))
    assert on.runs[0].loop.order == ("zero_grad", "forward", "backward", "step")
    off = validated(edits.set_zero_grad(on, "yours", False))
    assert off.runs[0].loop.order == ("forward", "backward", "step")
    manual = load_scenario("manual-sgd")
    back = edits.set_zero_grad(
        edits.set_zero_grad(manual, "yours", False), "yours", True, edits.restore_orders(manual)["yours"]
    )
    assert back.runs[0].loop.order == manual.runs[0].loop.order
    adam = validated(edits.set_optimizer(load_scenario("set-to-none"), kind="Adam"))
    assert all(r.optimizer.kind == "Adam" and not r.optimizer.options for r in adam.runs)


def _lab_moment(name: str, ticks: int) -> Moment:
    lab = Lab(load_scenario(name))
    info = describe_lab(lab)
    history = WindowHistory(info)
    for _ in range(ticks):
        lab.step()
    history.extend(StepResult(entries_since(lab, {}), (), {}, -2, {}, False))
    return Moment(info, history, history.last_tick)


def test_narration_says_gradients_pile_up_without_zero_grad() -> None:
    moment = _lab_moment("forgot-zero-grad", 4 + 3)  # one iteration, then forward and backward again
    text = narrate(moment)
    assert text.startswith("yours: backward() added")
    assert "holds the sum of 2 backward calls because zero_grad was skipped" in text


def test_narration_of_the_two_batch_example_uses_pytorchs_numbers() -> None:
    moment = _lab_moment("two-batch-accumulation", 3)  # zero_grad, forward [4], backward
    assert "backward() added -16 to weight.grad, which was None" in narrate(moment)
    moment = _lab_moment("two-batch-accumulation", 5)  # and forward [2], backward
    assert "added -4 to weight.grad" in narrate(moment)
    assert "by design: the micro-batches of one step accumulate" in narrate(moment)
    moment = _lab_moment("two-batch-accumulation", 6)
    assert "optimizer.step() moved weight by +0.2" in narrate(moment)


def test_window_history_lookups_by_tick() -> None:
    moment = _lab_moment("forgot-zero-grad", 8)
    history = moment.history
    assert list(history.op_ticks) == list(range(8))
    assert history.runs["yours"].index_at(0) == -1, "yours has no op at tick 0 (it skips zero_grad)"
    assert history.snap(3.7) == 3 and history.snap(-0.2) == -1
    assert history.prev_op_tick(0) == -1 and history.next_op_tick(7) is None
    assert Moment(moment.info, history, 2).last_backward("yours").op == "backward"
    history.clear()
    assert history.last_tick == -1


def test_zero_grad_narration_names_the_call_that_ran_and_claims_only_what_is_true() -> None:
    # GAN, tick 4: opt_g.zero_grad() while D's .grad still holds loss_d's gradient.
    gan = narrate(_lab_moment("gan-detach", 5))
    assert gan.startswith("no-detach: opt_g.zero_grad() cleared its own model's gradients")
    assert "piling up" not in gan
    # model.zero_grad() never clears the parameter held outside the model: it does pile up.
    text = narrate(_lab_moment("net-vs-optimizer-zero-grad", 5))
    assert text.startswith("model: model.zero_grad() cleared what it holds but not offset.grad")
    assert "keeps piling up" in text


def test_narration_at_the_discriminators_backward_says_whether_the_generators_grad_was_touched() -> None:
    moment = _lab_moment("gan-detach", 3)  # opt_d.zero_grad(), forward, loss_d.backward()
    assert narrate(moment, "no-detach").startswith(
        "no-detach: loss_d.backward() filled D's .grad and also G's"
    )
    assert "G's .grad was not touched (fake.detach() cut the graph" in narrate(moment, "detach")
    assert "G's .grad was not touched (fake was made under torch.no_grad()" in narrate(moment, "no-grad")


def test_narration_follows_the_run_whose_code_is_shown_and_leads_with_the_lessons_parameter() -> None:
    moment = _lab_moment("set-to-none", 3)
    text = narrate(moment, "zeros")
    added = fmt.number(moment.op_record("zeros").fresh_grads["offset"].item(), 3)
    assert text.startswith(f"zeros: backward() added {added} to offset.grad"), text
    assert narrate(moment).startswith("none: ")
    # A run with no op at this moment: the one that had one is narrated, and named.
    assert narrate(_lab_moment("forgot-zero-grad", 1), "yours").startswith("reference: ")
