"""Helpers shared by the test files: waiting for an event instead of sleeping, the tiny HF engine, and the
reference PPO clipped loss that the trainer's gradients are compared with.

Tests wait for what they need to see (``wait_until``), never for a fixed time, and assert on the order of
events, never on durations: timings belong in ``benchmarks/``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 60.0, what: str = "", interval: float = 0.05
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a true value, and return that value.

    ``timeout`` only bounds a test that would otherwise hang: it raises ``AssertionError`` naming ``what``
    (what the test waited for), it is never the thing a test checks.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def wait_until_steady(read: Callable[[], T], settle: float = 0.3, timeout: float = 30.0, what: str = "") -> T:
    """Wait until ``read()`` returns the same value twice ``settle`` seconds apart (work that was told to
    stop has stopped), and return it; ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    value = read()
    while True:
        time.sleep(settle)
        again = read()
        if again == value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or read} kept changing for {timeout} s")
        value = again


@contextlib.contextmanager
def tiny_hf_engine(model_dir, **kwargs) -> Iterator:
    """An ``HFEngine`` on ``model_dir`` (``kwargs`` as its constructor takes them), closed on exit."""
    from openclaw_trl.engines.hf import HFEngine

    engine = HFEngine(model_dir, **kwargs)
    try:
        yield engine
    finally:
        engine.close()


def clipped_surrogate(logp, advantages, low: float = 0.8, high: float = 1.28):
    """The PPO clipped surrogate per token, ``-min(r A, clip(r, low, high) A)``, with the ratio
    ``r = exp(logp - logp.detach())``: 1 in value (the first pass of a batch), ``d logp`` in gradient.

    ``advantages`` broadcasts against ``logp`` (``[B, 1]`` per sequence, ``[B, T]`` per token). The defaults
    are TRL's ``epsilon = 0.2`` and the ``epsilon_high = 0.28`` the RL methods use.
    """
    import torch

    ratio = torch.exp(logp - logp.detach())
    return -torch.min(ratio * advantages, ratio.clamp(low, high) * advantages)


def token_mean(per_token, mask):
    """The sum over every unmasked token of the batch divided by their number (TRL's ``dapo`` loss, the
    default ``loss_type``)."""
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def served_turn(session_id: int, text: str = "q", **fields):
    """A served main turn of ``session_id`` whose user message is ``text``: two prompt ids, one completion
    token with its log-prob, on-policy at temperature 1; ``fields`` override any of its fields."""
    from openclaw_trl.records import ServedTurn

    turn = dict(
        session_id=session_id,
        turn_type="main",
        prompt_messages=[{"role": "user", "content": text}],
        tools=None,
        prompt_ids=[1, 2],
        completion_ids=[3],
        sampling_logprobs=[-0.5],
        completion_text="x",
        temperature=1.0,
        policy_version=0,
        finish_reason="stop",
        trainable=True,
    )
    return ServedTurn(**(turn | fields))
