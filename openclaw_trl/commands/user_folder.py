"""``--user NAME`` for the commands that work on one run's adapter or store (export, merge, push, compare).

A recipe that lists ``users`` keeps each user's run apart: their store, checkpoints and adapter live in
``<output_dir>/users/<name>/`` (``openclaw_trl.users.user_dir``). These commands take a run folder (or a
store file in it), so the users of a run are the folders of its ``users/``:

* a folder with user folders and no ``--user``: refused, naming the users (say whose adapter or store);
* ``--user NAME``: ``<folder>/users/<NAME>`` (the folder of that user alone), refused when the folder has
  no ``users/`` (a run without users has one adapter) or no folder for ``NAME`` (naming those it has);
* a folder without ``users/`` and no ``--user``: the folder itself, exactly as without users.

A folder that already is ``.../users/<NAME>`` is accepted with ``--user NAME`` as it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from openclaw_trl.errors import UserError
from openclaw_trl.users import USERS_DIR, check_user_name

STORE_FILE = "openclaw.sqlite"
"""The store file of a user's run folder (``users.user_plan``'s ``store_path``)."""


def add_user_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--user NAME`` with a help line saying what it selects (``what``: "adapter", "store", ...)."""
    parser.add_argument(
        "--user",
        default=None,
        metavar="NAME",
        help=f"for a recipe with users: whose {what} (their run folder <output_dir>/users/NAME); "
        "required when the run has users, refused when it has none",
    )


def run_users(folder: Path) -> list[str]:
    """The user names that have a folder in ``<folder>/users/`` (sorted; empty without ``users/``)."""
    users = folder / USERS_DIR
    if not users.is_dir():
        return []
    names = []
    for child in users.iterdir():
        try:
            check_user_name(child.name)
        except ValueError:
            continue
        if child.is_dir():
            names.append(child.name)
    return sorted(names)


def user_folder(folder: str | Path, user: str | None, what: str) -> Path:
    """The folder to work on for ``user`` in the run folder ``folder`` (module docstring: the rules)."""
    folder = Path(folder).expanduser()
    names = run_users(folder)
    if user is None:
        if names:
            raise UserError(
                f"{folder} holds the runs of users ({', '.join(names)}): say whose {what} with --user NAME"
            )
        return folder
    try:
        check_user_name(user)
    except ValueError as err:
        raise UserError(f"--user: {err}") from None
    if folder.name == user and folder.parent.name == USERS_DIR:
        return folder  # already that user's folder
    if not folder.is_dir():
        raise UserError(f"--user {user}: {folder} is not a folder (pass the run's output_dir)")
    if not (folder / USERS_DIR).is_dir():
        raise UserError(
            f"--user {user}: {folder} has no {USERS_DIR}/ folder (a run without users has one adapter); "
            "drop --user, or pass the output_dir of a run with users"
        )
    if user not in names:
        raise UserError(
            f"--user {user}: no folder {folder / USERS_DIR / user} (users of this run: {', '.join(names) or 'none yet'})"
        )
    return folder / USERS_DIR / user


def user_store(store: str | Path, user: str | None) -> Path:
    """The store file for ``user``: ``store`` is a store file or a run folder (then its ``openclaw.sqlite``).

    With ``user``, the store of ``<run folder>/users/<user>/``; without, ``store`` itself, refused when its
    run folder has users (each user's conversations are in their own store)."""
    path = Path(store).expanduser()
    folder = path if path.is_dir() else path.parent
    chosen = user_folder(folder, user, "store")
    if user is None:
        return path / STORE_FILE if path.is_dir() else path
    return chosen / STORE_FILE
