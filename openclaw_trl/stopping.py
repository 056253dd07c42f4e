"""Ctrl-C (SIGINT) and SIGTERM stop a command at any moment, within a few seconds, keeping the last whole
checkpoint.

A command calls :func:`install` first thing; the run's training (and a serve-only server's serving) runs
inside :func:`graceful`. What a signal does depends on where the process is:

* before :func:`graceful` (imports, loading the model, starting the server, judging recorded conversations):
  one line says the command stopped, and the process exits at once with ``128 + signal`` (130 for Ctrl-C,
  143 for SIGTERM). Nothing learned in this process is in memory only: the store's rows are committed by
  SQLite, the checkpoints on disk are left as they are.
* inside :func:`graceful`: ``KeyboardInterrupt`` is raised in the main thread, and the run saves a
  checkpoint of its last update. An interrupt that lands where Python cannot raise it (a finalizer such as
  an event loop's ``__del__``, which Python reports as "Exception ignored" and goes on) is raised again every
  ``RETRY_S`` seconds until the process leaves :func:`graceful`.
* after :func:`graceful` (saving the checkpoint): a further signal says what is happening; one more exits at
  once. A checkpoint cut short that way is incomplete, and the next start moves it aside and continues from
  the last whole one.

A command that has finished ends with :func:`finish`: the ``atexit`` handlers run (trackers finish, logs are
flushed), the standard streams are flushed, and the process exits without the interpreter's teardown of torch
and the other libraries' modules, which took seconds on a busy machine after the last line was printed.

Without :func:`install` (a program that runs the package's functions itself), :func:`graceful` still turns
SIGINT and SIGTERM into ``KeyboardInterrupt`` in its block and restores the previous handlers after it; the
rest of the process keeps its own signal handling.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

RETRY_S = 1.0
"""Seconds between two tries to raise the interrupt in the main thread while a stop is pending."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class _StopState:
    """The process's one stop state: its phase and the signals received (only this module changes it)."""

    def __init__(self):
        self.installed = False
        self.phase = "starting"  # starting -> graceful -> finishing
        self.requested: int | None = None  # the first signal received, if any
        self.finishing_signals = 0
        self.lock = threading.Lock()


_STATE = _StopState()


def install() -> None:
    """Take over SIGINT and SIGTERM for this command (module docstring). Call it from the main thread,
    before anything slow; calling it again changes nothing."""
    if _STATE.installed or threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _handle)
    sys.unraisablehook = _QuietInterrupt(sys.unraisablehook)
    _STATE.installed = True


def finish(code: int) -> None:
    """End the process with exit ``code`` now that the command has finished (module docstring); it does not
    return."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def stop_requested() -> bool:
    """Whether Ctrl-C or SIGTERM was received."""
    return _STATE.requested is not None


class _QuietInterrupt:
    """``sys.unraisablehook`` that drops an interrupt swallowed by a finalizer once a stop is pending (it is
    raised again, module docstring); everything else goes to the previous hook."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt) and stop_requested():
            return
        self.previous(unraisable)


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"openclaw-trl: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: exiting matters more than saying so
        pass


def _exit_now(signum: int) -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os._exit(128 + signum)


def _handle(signum, frame) -> None:
    with _STATE.lock:
        first = _STATE.requested is None
        if first:
            _STATE.requested = signum
        phase = _STATE.phase
    if phase == "starting":
        _say(f"stopped ({_NAMES.get(signum, signum)}) before training started; nothing was lost")
        _exit_now(signum)
    if phase == "finishing":
        _STATE.finishing_signals += 1
        if _STATE.finishing_signals == 1:
            _say("stopping: saving the last update and closing, a moment (once more quits without waiting)")
            return
        _say("stopped without saving; the next start continues from the last whole checkpoint")
        _exit_now(signum)
    if first:
        threading.Thread(target=_retry_interrupt, args=(signum,), name="stop-retry", daemon=True).start()
    raise KeyboardInterrupt


def _retry_interrupt(signum: int) -> None:
    """Raise the interrupt again while the main thread is still inside :func:`graceful` (it was swallowed)."""
    while True:
        threading.Event().wait(RETRY_S)
        if _STATE.phase != "graceful" or signal.getsignal(signum) is not _handle:
            return
        # the signal itself, to the main thread: it also wakes a blocking call (a sleep, a lock's wait)
        signal.pthread_kill(threading.main_thread().ident, signum)


@contextmanager
def graceful():
    """The block in which a signal raises ``KeyboardInterrupt`` (the run stops and saves a checkpoint);
    after it, the process is finishing (module docstring). In a thread other than the main one, it changes
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = None if _STATE.installed else {s: signal.signal(s, _handle) for s in SIGNALS}
    _STATE.phase = "graceful"
    try:
        if _STATE.requested is not None:  # a signal arrived as the block began
            raise KeyboardInterrupt
        yield
    finally:
        _STATE.phase = "finishing" if _STATE.installed else "starting"
        if previous is not None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            _STATE.requested = None
            _STATE.finishing_signals = 0
