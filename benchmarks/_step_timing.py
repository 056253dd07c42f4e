"""Timing and memory of trainer steps for the benchmarks: ``Memory`` (peak memory over a window), ``Baton``
(trainers in threads take one optimizer step each in turn), ``step_timer`` (a callback timing each step) and
``available_gib``."""

from __future__ import annotations

import gc
import time
from pathlib import Path


class Memory:
    """Peak memory over a window: CUDA max allocated, else the process' peak RSS (VmHWM reset at start)."""

    def __init__(self):
        import torch

        self.cuda = torch.cuda.is_available()

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return
        gc.collect()
        try:  # hand freed heap back to the OS first, or earlier trainers' garbage counts as this one's peak
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        except OSError:
            pass

    def peak_bytes(self) -> int:
        import torch

        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0


class Baton:
    """Lets trainers running in threads take turns, one optimizer step each (only the holder runs).

    Paired steps, adjacent in time, see the same machine load: the ratio of two such steps is far less noisy
    on a shared CPU than the ratio of two runs minutes apart.
    """

    def __init__(self, names: list[str]):
        import threading

        self.cond = threading.Condition()
        self.order, self.done, self.turn = list(names), set(), names[0]

    def wait(self, me: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == me)

    def pass_on(self, me: str, finished: bool = False) -> None:
        with self.cond:
            if finished:
                self.done.add(me)
            live = [n for n in self.order if n not in self.done]
            if live:
                i = self.order.index(me)
                self.turn = next(n for n in self.order[i + 1 :] + self.order[: i + 1] if n not in self.done)
            self.cond.notify_all()


def available_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def step_timer(name: str = "", baton: Baton | None = None):
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall and CPU time between consecutive optimizer steps; memory peak over all steps but the first.

        With a baton the trainer hands over to its peer after each step and the clock stops while it waits.
        """

        def __init__(self):
            self.times: list[float] = []
            self.cpu: list[float] = []  # process CPU time (all threads): robust when cores are shared
            self.memory = Memory()
            self.peak = 0

        def _sync(self):
            if self.memory.cuda:
                import torch

                torch.cuda.synchronize()

        def _start(self):
            if baton is not None:
                baton.wait(name)
            self._sync()
            self.t, self.c = time.perf_counter(), time.process_time()

        def on_train_begin(self, args, state, control, **kwargs):
            self._start()

        def on_step_end(self, args, state, control, **kwargs):
            self._sync()
            now = time.perf_counter()
            self.times.append(now - self.t)
            self.cpu.append(time.process_time() - self.c)
            if len(self.times) == 1:
                self.memory.reset()  # measure the steady state, not the warm-up allocations
            else:
                self.peak = max(self.peak, self.memory.peak_bytes())
            if baton is not None:
                baton.pass_on(name)
            self._start()

        def on_train_end(self, args, state, control, **kwargs):
            if baton is not None:
                baton.pass_on(name, finished=True)

    return StepTimer()
