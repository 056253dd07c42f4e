"""Training one adapter per user on one base model: the shared base weights and the fair turn to update.

``SharedBase``: the base model is loaded once; each user's trainer gets a copy of the module tree whose
parameters and buffers *are* the base's (``copy.deepcopy`` with every tensor pre-seeded in its memo), into
which PEFT then injects that user's own LoRA layers. So each user has a complete, ordinary single-adapter
model (their adapter named ``default``, saved, checkpointed, resumed and rolled back exactly as in a run
with one user), while the base weights exist once in memory. The base weights are frozen (PEFT sets
``requires_grad = False``), so no update of one user can change them for another; an extra user costs
their LoRA weights, its gradients and optimizer state (about three times the adapter) and the module objects.

``UpdateTurns``: one update at a time, in the order the users' batches became ready (a FIFO ticket). A user
who just updated queues behind every user already waiting, so among users with a ready batch the updates go
round-robin and one user's backlog never starves another. A trainer queues once its batch is taken and
holds its turn until its update is stepped, published, logged and checkpointed (``OpenClawTrainer.
get_batch_samples`` gives the previous turn back and takes the next one), so two users' updates never run at
the same time (the device's memory, the optimizer-step bookkeeping that accelerate shares between trainers in
a process, and the CPU time of writing a checkpoint, which would otherwise slow the next user's update).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque


class SharedBase:
    """The base model, loaded once (``load(path, **model_init_kwargs)`` as TRL would), handed out as copies
    that share every parameter and buffer (``copy_for_user``)."""

    def __init__(self, model) -> None:
        self.model = model

    @classmethod
    def load(cls, model_path: str, device=None, **model_init_kwargs) -> SharedBase:
        """Load the base as TRL loads a trainer's model, on ``device`` before it is shared (moving a copy
        later would move the shared parameters but give that copy buffers of its own)."""
        from trl.trainer.utils import create_model_from_path

        model = create_model_from_path(model_path, **model_init_kwargs)
        if device is not None and "quantization_config" not in model_init_kwargs:
            model.to(device)
        return cls(model)

    def copy_for_user(self):
        """A module tree of its own (a user's LoRA layers go into it) over the base's very tensors."""
        memo = {id(t): t for t in self.model.parameters()}
        memo.update({id(t): t for t in self.model.buffers()})
        return copy.deepcopy(self.model, memo)

    def shares_base(self, model) -> bool:
        """Whether every base tensor of ``model`` (PEFT-wrapped or not) is one of this base's tensors."""
        mine = {t.data_ptr() for t in self.model.parameters()}
        names = dict(self.model.named_parameters())
        theirs = {
            name.replace("base_model.model.", "").replace(".base_layer", ""): p
            for name, p in model.named_parameters()
            if "lora_" not in name
        }
        return all(theirs[name].data_ptr() in mine for name in names if name in theirs) and bool(theirs)


class UpdateTurns:
    """The fair schedule of updates among users (module docstring): ``take(name)`` blocks until it is
    ``name``'s turn, ``give_back(name)`` ends it. ``order`` records whose updates ran, in order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[str] = deque()
        self._holder: str | None = None
        self.order: list[str] = []

    def take(self, name: str) -> float:
        """Queue for a turn and block until it is ``name``'s; returns the seconds waited."""
        started = time.perf_counter()
        with self._cond:
            if self._holder == name:
                return 0.0  # already holding it: taking it again does not queue behind itself
            self._queue.append(name)
            while self._holder is not None or self._queue[0] != name:
                self._cond.wait()
            self._queue.popleft()
            self._holder = name
            self.order.append(name)
        return time.perf_counter() - started

    def give_back(self, name: str) -> None:
        """End ``name``'s turn (nothing when it does not hold one)."""
        with self._cond:
            if self._holder == name:
                self._holder = None
                self._cond.notify_all()

    def holder(self) -> str | None:
        with self._cond:
            return self._holder
