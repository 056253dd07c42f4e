"""The toy world's simulated people, one per preference, for recipes with several users.

``simulated_user`` names a zero-argument callable (``package.module:name``); each of these returns a
:func:`openclaw_trl.toy.world.make_user` with one hidden preference, so two users of one run can want
different things (``recipes/toy_two_users.yaml``: alice wants bulleted answers, bob brief ones).
"""

from __future__ import annotations

from openclaw_trl.toy.world import make_user


def bullets():
    """Wants answers as a bulleted list."""
    return make_user("bullets")


def brief():
    """Wants brief answers: one fact."""
    return make_user("brief")


def formal():
    """Wants formal answers."""
    return make_user("formal")


def numbered():
    """Wants answers as a numbered list."""
    return make_user("numbered")
