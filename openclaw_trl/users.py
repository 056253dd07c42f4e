"""Users: several people (or agents) share one base model, each teaching an adapter of their own.

A recipe lists its users, each with a name and the environment variable holding their API key (on the
command line: ``--users alice:ALICE_KEY bob:BOB_KEY``)::

    users:
      - name: alice
        api_key_env: ALICE_KEY
      - name: bob
        api_key_env: BOB_KEY
        simulated_user: openclaw_trl.toy.world:BriefUser   # only read with `source: simulated`

A request's bearer key selects its user (the UI's login: the user's name and key). Everything a user
teaches lives apart from the others': their store (sessions, turns, votes, hints, samples, versions) and
their run folder (checkpoints, adapter, metrics, exports) are ``<output_dir>/users/<name>/``, so no query,
judge prompt, teacher prompt or route of one user can read another's. With no ``users`` the run has one
implicit user and keeps today's layout (``<output_dir>`` itself).
"""

from __future__ import annotations

import copy
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path

from openclaw_trl.errors import UserError

MAX_USERS = 64
"""Most users one run serves (each costs an adapter, its optimizer state and a store)."""

USERS_DIR = "users"
"""The folder of ``output_dir`` that holds one folder per user."""

_FIELDS = {"name", "api_key_env", "simulated_user"}

NAME_CHARS = 32
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def check_user_name(name) -> None:
    """``ValueError`` unless ``name`` is 1-32 characters of ``a-z 0-9 _ -`` starting with a letter or digit
    (safe as a folder name, a vLLM LoRA name and a UI login)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"a user name must be 1-{NAME_CHARS} characters of a-z, 0-9, '_' or '-' "
            f"starting with a letter or digit, got {name!r}"[:200]
        )


@dataclass(frozen=True)
class UserSpec:
    """One user of a recipe.

    name: 1-32 characters of ``a-z 0-9 _ -`` starting with a letter or digit: the user's folder, adapter name
        and UI login name.
    api_key_env: the environment variable that holds the user's API key (their UI password too).
    simulated_user: with ``source: simulated``, the simulated user class that talks as this user
        (``package.module:Class``; None: the recipe's ``simulated_user``).
    """

    name: str
    api_key_env: str
    simulated_user: str | None = None


def parse_users(raw) -> tuple[UserSpec, ...]:
    """The recipe's ``users`` list as ``UserSpec``s; ``UserError`` naming the problem otherwise."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)) or not raw:
        raise UserError("users must be a non-empty list of {name, api_key_env} entries (or left out)")
    if len(raw) > MAX_USERS:
        raise UserError(f"users lists {len(raw)} users; at most {MAX_USERS} are served by one run")
    specs = []
    for i, entry in enumerate(raw):
        if isinstance(entry, UserSpec):
            entry = {
                "name": entry.name,
                "api_key_env": entry.api_key_env,
                "simulated_user": entry.simulated_user,
            }
        elif isinstance(entry, str):  # the command line's form: name:API_KEY_ENV[:package.module:Class]
            parts = entry.split(":", 2)
            if len(parts) < 2:
                raise UserError(
                    f"users[{i}] must be name:API_KEY_ENV on the command line, got {entry!r}"[:200]
                )
            entry = dict(zip(("name", "api_key_env", "simulated_user"), parts, strict=False))
        if not isinstance(entry, dict):
            raise UserError(f"users[{i}] must be a mapping with name and api_key_env, got {entry!r}"[:200])
        unknown = sorted(set(entry) - _FIELDS)
        if unknown:
            raise UserError(f"users[{i}] has unknown fields {unknown}; known: {sorted(_FIELDS)}")
        name, env = entry.get("name"), entry.get("api_key_env")
        try:
            check_user_name(name)
        except ValueError as err:
            raise UserError(f"users[{i}].name: {err}") from None
        if not isinstance(env, str) or not env.strip():
            raise UserError(
                f"users[{i}] ({name}) needs api_key_env: the environment variable holding their API key"
            )
        simulated = entry.get("simulated_user")
        if simulated is not None and (not isinstance(simulated, str) or ":" not in simulated):
            raise UserError(
                f"users[{i}].simulated_user must be 'package.module:Class', got {simulated!r}"[:200]
            )
        specs.append(UserSpec(name, env.strip(), simulated))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UserError(f"users has duplicate names: {sorted({n for n in names if names.count(n) > 1})}")
    envs = [s.api_key_env for s in specs]
    if len(set(envs)) != len(envs):
        raise UserError("each user needs an api_key_env of their own (two users share one)")
    return tuple(specs)


def user_dir(output_dir: str | Path, name: str) -> Path:
    """The run folder of user ``name``: ``<output_dir>/users/<name>``."""
    return Path(output_dir) / USERS_DIR / name


@dataclass(frozen=True)
class UserPlan:
    """Where one user of a run keeps what they teach, derived from the recipe (which stays as parsed).

    name: the user's name, or None for the run's only user (a recipe without ``users``).
    output_dir, store_path, logging_dir, run_name: their run folder, store, TensorBoard folder and run name
        (``<output_dir>/users/<name>/...`` for a named user; the recipe's own for the run's only user).
    simulated_user: the simulated user class that talks as them with ``source: simulated``.
    api_key_env: the environment variable holding their API key (None: the server needs no key).
    """

    name: str | None
    output_dir: str
    store_path: str
    logging_dir: str | None
    run_name: str | None
    simulated_user: str | None
    api_key_env: str | None


def user_plan(config, spec: UserSpec) -> UserPlan:
    """The plan of user ``spec`` of ``config``'s run: their folder ``<output_dir>/users/<name>/`` holds their
    store, checkpoints, adapter and metrics; their run name is ``<run_name>-<name>``."""
    folder = user_dir(config.output_dir, spec.name)
    return UserPlan(
        name=spec.name,
        output_dir=str(folder),
        store_path=str(folder / "openclaw.sqlite"),
        logging_dir=str(folder / "runs") if getattr(config, "logging_dir", None) else None,
        run_name=f"{config.run_name}-{spec.name}" if config.run_name else spec.name,
        simulated_user=spec.simulated_user or config.simulated_user,
        api_key_env=spec.api_key_env,
    )


def plan_users(config) -> tuple[UserPlan, ...]:
    """One plan per user of ``config``'s run: one per entry of ``users``, or, without ``users``, the run's only
    user (``name`` None) with the recipe's own folder, store and key."""
    specs = config.user_specs
    if specs:
        return tuple(user_plan(config, spec) for spec in specs)
    only = UserPlan(
        name=None,
        output_dir=config.output_dir,
        store_path=config.store_path,
        logging_dir=getattr(config, "logging_dir", None),
        run_name=config.run_name,
        simulated_user=config.simulated_user,
        api_key_env=config.api_key_env,
    )
    return (only,)


def user_args(config, plan: UserPlan, model_init_kwargs: dict | None):
    """The config every component of ``plan``'s user is built from: ``config`` with the user's folder, store,
    run name and simulated user, no ``users`` (each component serves that user alone), and the
    ``model_init_kwargs`` their trainer loads the model with (None: the trainer gets a model already built).

    The trainer is TRL's and reads these fields from its arguments, so the user's values go into a config of
    their own. It is a shallow copy with those fields set, made here only: ``dataclasses.replace`` would run
    ``__post_init__`` again, which refuses the fields it derived itself (the batch geometry). ``config`` itself
    is never changed.
    """
    out = copy.copy(config)
    vars(out).update(
        output_dir=plan.output_dir,
        store_path=plan.store_path,
        logging_dir=plan.logging_dir,
        run_name=plan.run_name,
        simulated_user=plan.simulated_user,
        users=None,
        model_init_kwargs=model_init_kwargs,
    )
    return out


def find_user(specs: tuple[UserSpec, ...], name: str | None) -> UserSpec | None:
    """The spec of ``name``: ``UserError`` for a name the recipe does not list, or for no name when it
    lists users (a command must say whose adapter it works on)."""
    names = ", ".join(s.name for s in specs)
    if name is None:
        if specs:
            raise UserError(f"this recipe has users ({names}): say whose adapter with --user NAME")
        return None
    if not specs:
        raise UserError(f"--user {name}: this recipe lists no users (its run has one adapter); drop --user")
    for spec in specs:
        if spec.name == name:
            return spec
    raise UserError(f"--user {name}: no such user in this recipe (its users: {names})")


class UserKeys:
    """The users' API keys, read from their environment variables when the server starts (fail closed: an
    unset or empty variable, or two users with the same key, refuse to start)."""

    def __init__(self, specs: tuple[UserSpec, ...], environ=None) -> None:
        environ = os.environ if environ is None else environ
        self._keys: list[tuple[str, str]] = []
        for spec in specs:
            key = environ.get(spec.api_key_env, "").strip()
            if not key:
                raise UserError(
                    f"user {spec.name}: api_key_env={spec.api_key_env!r} is empty or unset; "
                    f"export {spec.api_key_env}=<their key>"
                )
            self._keys.append((spec.name, key))
        keys = [key for _, key in self._keys]
        if len(set(keys)) != len(keys):
            raise UserError("two users have the same API key: each key must select one user")

    def user_of(self, presented: str | None) -> str | None:
        """The user whose key is ``presented`` (compared in constant time with every key), or None."""
        found = None
        given = (presented or "").encode()
        for name, key in self._keys:
            if hmac.compare_digest(given, key.encode()):
                found = name
        return found

    def check(self, name: str, presented: str | None) -> bool:
        """Whether ``presented`` is the key of user ``name`` (the UI's login)."""
        return self.user_of(presented) == name
