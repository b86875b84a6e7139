"""gradviz: watch a real PyTorch training loop one op at a time."""

__version__ = "0.1.0"
