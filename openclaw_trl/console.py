"""The terminal of a run: readable log lines, a repeated warning shown once, no library noise by default.

``configure_console(log_level)`` sets up Python ``logging`` for the command-line entry points; ``log_level``
is the recipe's (TrainingArguments' ``log_level``):

* ``passive`` (the default): this package's messages at INFO (the served URL, what starting up does, one
  line per update, a rollback, a resume), every other library's at WARNING; transformers' progress bars
  (loading weights) off, uvicorn's per-request lines off; a library's deprecation notices
  (``FutureWarning``, ``DeprecationWarning``: one library warning of a change in another, for their
  developers) hidden;
* ``info`` / ``debug``: every library at that level, transformers' bars and uvicorn's request lines on;
* ``warning`` / ``error`` / ``critical``: everything, this package included, at that level.

Lines read ``HH:MM:SS message``; a warning or an error says so, and which library it comes from
(``12:00:01 WARNING transformers: ...``). Errors are never hidden.

A Python warning (``FutureWarning``, ``UserWarning``, ...) that the filters let through is shown once per
process (per category and text), as one such line with the file and line it comes from. Python's own
``default`` and ``once`` actions remember what was shown per module, and forget it whenever any library
changes the warning filters, so the same warning came back with every model load. With ``-W`` or
``PYTHONWARNINGS`` set, Python shows warnings as those say (nothing is deduplicated); ``-W error`` still
turns them into errors.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from pathlib import Path

from openclaw_trl.config_checks import LOG_LEVELS

PACKAGE_LOGGER = "openclaw_trl"
QUIET_LEVELS = ("passive", "warning", "error", "critical")
"""``log_level`` values that keep the libraries' INFO messages, progress bars and request lines off."""

DEPRECATIONS = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)
"""Warning categories by which a library announces a change to come: hidden at the ``passive`` log level
when they come from an installed library (shown from this package, a script, or with another level)."""

_LEVELS = {name: getattr(logging, "INFO" if name == "passive" else name.upper()) for name in LOG_LEVELS}


class ConsoleFormatter(logging.Formatter):
    """``HH:MM:SS message``; from WARNING up ``HH:MM:SS LEVEL [library]: message``."""

    def __init__(self):
        super().__init__(datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        when = self.formatTime(record, self.datefmt)
        if record.levelno < logging.WARNING:
            return f"{when} {text}"
        library = getattr(record, "library", record.name.split(".")[0])
        source = "" if library in ("", PACKAGE_LOGGER) else f" {library}"
        return f"{when} {record.levelname}{source}: {text}"


class _ConsoleHandler(logging.StreamHandler):
    """The handler ``configure_console`` installs (found again and replaced when it is called again)."""


def configure_console(log_level: str = "passive", stream=None) -> None:
    """Logging, warnings and progress bars for a run in a terminal (module docstring). Call it again once
    the recipe is read; each call replaces the handler of the previous one."""
    level = _LEVELS.get(str(log_level).lower())
    if level is None:
        raise ValueError(f"log_level must be one of {', '.join(_LEVELS)}, got {log_level!r}")
    quiet = str(log_level).lower() in QUIET_LEVELS
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _ConsoleHandler)]:
        root.removeHandler(old)
    handler = _ConsoleHandler(stream or sys.stderr)
    handler.setFormatter(ConsoleFormatter())
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING) if quiet else level)
    logging.getLogger(PACKAGE_LOGGER).setLevel(level)
    if not sys.warnoptions and not isinstance(warnings.showwarning, _ShowOnce):
        warnings.showwarning = _ShowOnce(warnings.showwarning)
    if isinstance(warnings.showwarning, _ShowOnce):
        warnings.showwarning.hide_deprecations = str(log_level).lower() == "passive"
    _transformers_console(bars=not quiet)


class _ShowOnce:
    """``warnings.showwarning`` that logs each (category, text) once per process (module docstring)."""

    def __init__(self, fallback):
        self.fallback = fallback
        self.shown: set[tuple[type, str]] = set()
        self.lock = threading.Lock()
        self.hide_deprecations = True  # a library's deprecation notices (the ``passive`` log level)

    def __call__(self, message, category, filename, lineno, file=None, line=None):
        if file is not None:  # shown somewhere chosen by the caller: as Python would
            self.fallback(message, category, filename, lineno, file, line)
            return
        if self.hide_deprecations and issubclass(category, DEPRECATIONS) and _library(filename):
            return
        with self.lock:
            key = (category, str(message))
            if key in self.shown:
                return
            self.shown.add(key)
        where = f"{Path(filename).name}:{lineno}"
        logging.getLogger("py.warnings").warning(
            "%s: %s (%s)", category.__name__, message, where, extra={"library": _library(filename)}
        )


def _library(filename: str) -> str:
    """The installed package a file belongs to (``transformers`` for ``.../site-packages/transformers/x.py``),
    else ``""`` (this package, or a script)."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return Path(parts[parts.index(marker) + 1]).stem
    return ""


def uvicorn_log_level(log_level: str) -> str:
    """uvicorn's level for the recipe's ``log_level``: its per-request lines only with ``info`` or ``debug``."""
    return "warning" if str(log_level).lower() in QUIET_LEVELS else str(log_level).lower()


def _transformers_console(bars: bool) -> None:
    """transformers' messages through this console's handler (its own handler off: every message would be
    printed twice), its own progress bars (loading weights) on or off. Hub downloads keep their bars: they
    show a first start that takes minutes. Older transformers without ``set_tqdm_hook`` keep theirs."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    if not hasattr(hf_logging, "set_tqdm_hook"):
        return
    hf_logging.set_tqdm_hook(None if bars else _silent_bar)


def _silent_bar(factory, args, kwargs):
    return factory(*args, **{**kwargs, "disable": True})


def browser_url(url: str) -> str:
    """``url`` as a browser on this machine opens it: a server listening on every interface (``0.0.0.0``,
    ``::``) is reached at ``127.0.0.1``."""
    for wildcard in ("://0.0.0.0:", "://[::]:", "://:::"):
        url = url.replace(wildcard, "://127.0.0.1:")
    return url


def serving_line(model: str, url: str, ui: bool, api_model: str) -> str:
    """The first line a person needs: what serves, and where
    (``openclaw-trl: serving Qwen/Qwen3-0.6B at http://127.0.0.1:7860 (UI) · OpenAI API at .../v1 (model "openclaw")``)."""
    local = browser_url(url)
    line = f"openclaw-trl: serving {model} at {local} (UI) · " if ui else f"openclaw-trl: serving {model} · "
    line += f'OpenAI API at {local}/v1 (model "{api_model}")' + ("" if ui else ", no UI")
    if local != url:
        line += f"; listening on every interface ({url})"
    return line


def learning_line(config, metrics_path) -> str:
    """What makes an update, when training stops, and where the numbers go."""
    if config.judge_backend == "feedback":
        signals = "👍/👎 ratings or corrections"
    else:
        judge = {
            "engine": "the served model as judge",
            "openai": config.judge_openai_model,
            "callable": config.judge_callable,
        }.get(config.judge_backend, config.judge_backend)
        signals = f"replies judged from the user's next message ({judge})"
    stop = (
        "Ctrl-C stops" if config.max_steps >= 10**9 else f"stops after update {config.max_steps} (or Ctrl-C)"
    )
    return (
        f"learning: one update every {config.batch_size} {signals} · metrics in {metrics_path} · "
        f"{stop} and keeps a checkpoint"
    )
