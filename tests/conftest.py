"""Shared test set-up: one intra-op thread (as the app uses), deterministic and quick."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch

torch.set_num_threads(1)
