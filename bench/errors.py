"""Errors that the CLI reports as one line (`error: ...`) with a non-zero exit, never as a traceback."""


class HarnessError(Exception):
    pass


class ConfigError(HarnessError, ValueError):
    """A config value a method or loader cannot use."""


class MissingRunsError(HarnessError, ValueError):
    """No complete run (or measurement file) a report needs; the message names what produces it."""
