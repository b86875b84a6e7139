"""``gradviz.watch()`` in a notebook: findings in the process, every hook and wrapper gone after."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch import nn
from torch.optim import optimizer as optmod

import gradviz


def _patched() -> tuple:
    return (
        torch.Tensor.backward,
        torch.autograd.backward,
        torch.optim.Optimizer.zero_grad,
        torch.nn.Module.zero_grad,
    )


def test_watch_finds_a_mistake_and_removes_everything_after_n_steps():
    before = _patched()
    pre, post = dict(optmod._global_optimizer_pre_hooks), dict(optmod._global_optimizer_post_hooks)
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    watched_after: list[bool] = []
    with gradviz.watch(steps=3) as rec:
        for _ in range(6):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()  # no zero_grad: gradients carried across steps
            opt.step()
            watched_after.append(_patched() != before)
    assert watched_after == [True, True, True, False, False, False]  # gone once 3 steps were seen
    assert _patched() == before
    assert dict(optmod._global_optimizer_pre_hooks) == pre
    assert dict(optmod._global_optimizer_post_hooks) == post
    assert not model.weight._post_accumulate_grad_hooks
    assert [(f.severity, f.file) for f in rec.findings] == [("warning", __file__)]
    assert rec.findings[0].message.startswith("backward() added to .grad that still held the gradient")
    assert rec.data["observed_updates"] == 3


def test_watch_saves_a_recording(tmp_path):
    from gradviz.watch import load_recording

    model = nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters())
    with gradviz.watch() as rec:
        for _ in range(2):
            opt.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
    assert rec.findings == []
    back = load_recording(rec.save(tmp_path / "rec.json"))
    assert back.findings == [] and [e["op"] for e in back.events] == ["zero_grad", "backward", "step"] * 2


def test_large_parameters_are_sampled():
    model = nn.Linear(100, 100)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradviz.watch(steps=1) as rec:
        opt.zero_grad()
        model(torch.ones(1, 100)).sum().backward()
        opt.step()
    weight = next(p for p in rec.params if p["name"] == "model.weight")
    assert weight["numel"] == 10_000 and len(weight["sample_index"]) == 32
    entry = rec.updates[0]["params"][str(weight["id"])]
    assert len(entry["sample"]) == 32 and "values" not in entry


def test_importing_gradviz_stays_cheap():
    code = "import sys, gradviz; gradviz.watch; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_what_a_recording_holds_is_a_copy_the_script_cannot_change_later():
    w = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5)
    with gradviz.watch(steps=2) as rec:
        for _ in range(5):  # watched for 2 steps; then the script goes on changing w in place
            opt.zero_grad()
            (w * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
            opt.step()
    # One tensor alone in a copy (the values a step read, the values as the watch ended).
    assert [u["params"]["0"]["values"] for u in rec.updates] == [[0.0, 0.0, 0.0], [-0.5, -1.0, -1.5]]
    assert rec.data["final"]["0"]["values"] == [-1.0, -2.0, -3.0]
    backwards = [ev for ev in rec.events if ev["op"] == "backward"]
    assert [ev["loss"] for ev in backwards] == [0.0, -7.0]
    assert [ev["grads"]["0"] for ev in backwards] == [[1.0, 2.0, 3.0]] * 2
