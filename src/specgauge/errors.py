"""The one base class for errors that are the user's to fix (bad input, bad flag, server fault).

The CLI prints these as one line and exits 2; anything else is a bug and keeps its traceback.
Subclass ``UserError`` for a new kind of user-facing error.
"""

from __future__ import annotations


class UserError(Exception):
    """An error whose message names the place (``FILE:LINE: field: what``, ``--flag: what``)."""


USER_ERRORS: tuple[type[BaseException], ...] = (UserError,)
