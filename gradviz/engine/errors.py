"""Errors that are the user's to fix: the CLI prints them as one sentence and exits 2."""


class UserError(Exception):
    """Bad input from the user: a scenario file, a name, an option or a device.

    The message is one complete sentence meant to be shown as it is.
    """


class ScenarioError(UserError):
    """A scenario file or table that does not validate."""


class DeviceError(UserError):
    """A requested device that this machine does not have."""
