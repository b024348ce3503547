"""Non-fatal notices about the user's input or environment, as one typed warning."""

from __future__ import annotations

__all__ = ["ParplanWarning"]


class ParplanWarning(UserWarning):
    """Something the user should know that does not stop the command.

    Raised with ``warnings.warn``; the ``parplan`` command prints each as one
    line, ``parplan: warning: <message>``, on stderr (never on stdout, so that
    ``--json`` output stays clean), once per message and place.
    """
