"""A script under torchrun is watched in rank 0 only; a CUDA model is copied off the device without
stalling it more than once per observed op (these skip without a GPU)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import gradviz
from gradviz.watch import load_recording
from tests.watch.test_watch import ROOT, _line

DDP_SCRIPT = """\
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
x = torch.randn(16, 2)
y = x @ torch.tensor([[2.0], [-1.0]]) + 0.5
model = DDP(nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for step in range(4):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
print(f"rank {rank} done")
dist.destroy_process_group()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Gloo's worker threads can abort a process during interpreter teardown, after the script has
# finished (pytorch/pytorch#179291); that abort, in a rank gradviz hands over to plain Python,
# gets one more try.
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def _watch_under_torchrun(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    run += ["--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    run += ["-m", "gradviz", "watch", "-o", "rec.json", "train.py"]
    return subprocess.run(run, cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")
def test_torchrun_is_watched_in_rank_0_only(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    proc = _watch_under_torchrun(tmp_path)
    if proc.returncode != 0 and GLOO_TEARDOWN_ABORT in proc.stderr:
        proc = _watch_under_torchrun(tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Both ranks write to the one pipe, so their lines may interleave: each says it finished.
    assert sorted(re.findall(r"rank (\d) done", proc.stdout)) == ["0", "1"], proc.stdout
    said = [line for line in proc.stderr.splitlines() if line.startswith("gradviz: started by torchrun")]
    assert said == [
        "gradviz: started by torchrun (2 processes): watching rank 0 only; the other ranks run unwatched."
    ]
    backward = _line(DDP_SCRIPT, "loss.backward()")
    found = [line for line in proc.stderr.splitlines() if line.startswith("train.py:")]
    assert len(found) == 1 and found[0].startswith(f"train.py:{backward}: warning:"), proc.stderr
    assert load_recording(tmp_path / "rec.json").data["observed_updates"] == 4


def test_other_ranks_run_untouched(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    backward = torch.Tensor.backward
    with gradviz.watch(steps=3) as rec:
        assert torch.Tensor.backward is backward, "nothing installed"
        w = torch.zeros(2, requires_grad=True)
        (w * 2).sum().backward()
    assert not rec.watched and rec.findings == []


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cuda_loop(steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(128, 64, device="cuda"), torch.randn(128, 1, device="cuda")
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return model, opt


def _syncs(run) -> int:
    """How many times ``run()`` made the host wait for the GPU (PyTorch's sync debug mode counts)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


@CUDA
def test_a_cuda_model_is_recorded_from_the_device_and_replays() -> None:
    from gradviz.watch.replay import replay_of

    with gradviz.watch(steps=5) as rec:
        model, _ = _cuda_loop(5)
    assert {p["device"] for p in rec.params} == {"cuda:0"}
    replay = replay_of(rec)
    last = replay.history.record(replay.run, replay.history.last_tick)
    assert last is not None
    name = next(n for n in last.params if n.endswith("2.weight"))
    assert (last.params[name] == model[2].weight.detach().cpu().numpy()).all(), (
        "the weights after the last step"
    )


@CUDA
def test_watching_a_cuda_loop_waits_for_the_device_at_most_once_per_observed_op() -> None:
    _cuda_loop(2)  # warm up kernels and the allocator
    plain = _syncs(lambda: _cuda_loop(5))
    holder = {}

    def watched() -> None:
        with gradviz.watch(steps=5) as rec:
            _cuda_loop(5)
        holder["rec"] = rec

    waits = _syncs(watched)
    ops = len(holder["rec"].events)
    assert waits - plain <= ops + 2, f"{waits - plain} waits for {ops} observed ops"
