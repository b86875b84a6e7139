"""One module per view; every view draws a :class:`gradviz.gui.tape.Moment`."""
