"""``openclaw_trl.stopping`` in a program that did not install it: inside ``graceful`` SIGTERM is a
``KeyboardInterrupt``, raised again when something swallowed it, and the program's own handler is back after."""

from __future__ import annotations

import os
import signal
import time

import pytest

from openclaw_trl import stopping


def test_sigterm_in_the_block_is_an_interrupt_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with stopping.graceful():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is before
    assert not stopping.stop_requested()


def test_an_interrupt_swallowed_in_the_block_is_raised_again():
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with stopping.graceful():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                pass  # swallowed, as a finalizer that runs at that moment would
            time.sleep(10)
    assert time.monotonic() - started < 2 * stopping.RETRY_S + 1
