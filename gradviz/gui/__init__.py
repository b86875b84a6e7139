"""The desktop app: a window that shows a real PyTorch training loop one op at a time.

Modules here import Qt; :mod:`gradviz.engine` (and so torch) is imported only
after the window is shown, on the worker thread.
"""
