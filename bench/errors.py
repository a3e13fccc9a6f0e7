"""Errors that the CLI reports as one line (`error: ...`) with a non-zero exit, never as a traceback."""


class HarnessError(Exception):
    pass
