"""The user-error type of the package.

A :class:`UserError` is a problem the person running a command can fix (a missing file, a model that
cannot be loaded, a recipe value out of range); its message says what is wrong and how to fix it. The
``openclaw-trl`` command (and ``app.py``) catches it in one place and prints it on one line with exit
code 2, never a traceback. It is a ``ValueError``, so library callers can catch either.
"""


class UserError(ValueError):
    """A problem the user can fix; the message says how."""
