"""One module per view; every view draws a :class:`gradviz.gui.window_history.Moment`."""
