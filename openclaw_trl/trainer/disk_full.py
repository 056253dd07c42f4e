"""Learning on a full disk: a checkpoint that cannot be written pauses learning until there is space again.

An update's checkpoint (adapter, optimizer, scheduler, RNG and trainer state) and its version record are written
after the update. When the disk is full, :func:`write_when_space` removes what the failed write left of the
folder (a checkpoint is whole or absent: ``resume`` only uses folders with their last file,
``trainer_state.json``), logs one line, and tries again every :data:`RETRY_S` seconds. Meanwhile the trainer
takes no batch (``/v1/status``: ``trainer_state`` is ``waiting for disk space``): serving, judging and collecting go on and samples keep queueing, so nothing is lost; once space
is back the checkpoint is written, one line says so, and learning goes on by itself.
"""

from __future__ import annotations

import errno
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger(__name__)

RETRY_S = 30.0
"""Seconds between two tries of a write that found the disk full."""

T = TypeVar("T")


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` (or an error it was raised from) says the disk is full: ``ENOSPC``, SQLite's full store
    (the store's ``StoreFull``), or a writer's message naming it (torch's and safetensors' writers)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return True
        if getattr(err, "code", None) == "insufficient_storage":
            return True
        if "No space left on device" in str(err) or "disk is full" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def write_when_space(
    write: Callable[[], T],
    what: str,
    folder: Path | None = None,
    retry_s: float | None = None,
    on_wait: Callable[[bool], object] | None = None,
) -> T:
    """``write()``, tried again every ``retry_s`` (default :data:`RETRY_S`) seconds for as long as it fails
    because the disk is full; ``folder``: where it writes, removed after a failed try unless it was whole
    (with ``trainer_state.json``) before; ``on_wait(True)`` when it starts waiting for space, ``on_wait(False)``
    once written after a wait. Any other error is raised at once."""
    from openclaw_trl.resume import is_complete

    wait = RETRY_S if retry_s is None else retry_s
    whole_before = folder is not None and is_complete(folder)
    paused_at = None
    while True:
        try:
            result = write()
        except Exception as err:
            if not is_disk_full(err):
                raise
            if folder is not None and not whole_before:
                shutil.rmtree(folder, ignore_errors=True)
            if paused_at is None:
                paused_at = time.monotonic()
                if on_wait is not None:
                    on_wait(True)
                logger.warning(
                    "%s not written, the disk is full (%s): learning pauses and tries again every %g s; "
                    "serving goes on and nothing learned is lost. Free some space to resume.",
                    what,
                    err,
                    wait,
                )
            time.sleep(wait)
            continue
        if paused_at is not None:
            if on_wait is not None:
                on_wait(False)
            logger.warning(
                "%s written: space is back after %.0f s, learning goes on", what, time.monotonic() - paused_at
            )
        return result
