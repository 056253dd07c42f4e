"""Telling the device's out-of-memory error from other failures, and giving cached memory back after one.

A batch that runs out of memory is retried one request at a time (``hf``): the error alone does not say the
requests are wrong, only that together they did not fit.
"""

from __future__ import annotations


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the device running out of memory (``torch.OutOfMemoryError``, or the plain
    ``RuntimeError`` "out of memory" some backends raise)."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


def free_cached_memory(device) -> None:
    """Give the allocator's cached blocks back (CUDA); nothing to do on the CPU."""
    import torch

    if getattr(device, "type", None) == "cuda":
        torch.cuda.empty_cache()
