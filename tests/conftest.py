"""Shared test set-up: one intra-op thread (as the app uses), deterministic and quick."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qapp():
    """The QApplication the app itself makes (its attributes and names), for every Qt test."""
    from gradviz.gui.display import application

    return application()
