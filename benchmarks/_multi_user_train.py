"""The training side of ``multi_user_bench.py``: users' trainers on one shared base, as a run with users builds them.

``build_users`` builds the users as a run with users does (``runtime.build_user``): the base loaded once
(``SharedBase``), one HF engine with ``max_adapters`` = the number of users, and per user their own store and
run folder (``users.user_plan``), an ``AdapterView`` of the engine and an ``OpenClawTrainer`` over
``SharedBase.copy_for_user()`` whose ``update_turns`` is the one shared ``UpdateTurns``. Each trainer runs
``train()`` in its own thread, as ``run_training.train_users`` does; the benchmark then
feeds the stores with judged samples (``trainer_bench.make_samples``) in *phases*:

* **alone**: ``k`` batches for the first user only; the others wait for samples (between updates, never
  holding the turn), so that user trains as if it were alone on the device.
* **shared**: ``k`` batches for every user at once; the users take turns (round-robin among ready batches).

Every sample carries ``policy_version`` = the update that consumes it, so every batch is on-policy in both
phases. The phases alternate (A B B A ...) after a warm-up update of every user, so that a drift of the
machine's load moves both sides. Each update's ``time/update_s`` (from its batch's turn to its published
step: the wait for the turn is ``schedule/turn_wait_s``, apart) is read from the trainers' logs afterwards.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import threading
import time
from pathlib import Path

from _trainer_setup import lora_config, make_samples, openclaw_args

PHASE_TIMEOUT_S = 1800.0
"""Longest a phase may take before the benchmark gives up (a trainer that died or hangs)."""


def rss_bytes() -> int:
    """This process's resident memory after a garbage collection and ``malloc_trim`` (freed heap returned)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class UpdateCount:
    """A trainer callback counting finished updates (after the step is published and the turn given back)."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        self.done = 0
        self.cond = threading.Condition()
        count = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                with count.cond:
                    count.done += 1
                    count.cond.notify_all()

        self.callback = _Callback()


@dataclasses.dataclass
class User:
    name: str
    trainer: object
    store: object
    counter: UpdateCount
    fed: int = 0  # batches put into the store so far
    thread: threading.Thread | None = None
    error: BaseException | None = None


def build_users(model_dir: Path, n: int, geometry: dict, updates: list[int], tmp: str, lora_r: int = 16):
    """The shared base, the engine and ``n`` users' trainers; ``updates[i]``: user i's ``max_steps``.

    Returns ``(shared, engine, turns, users, rss)``: ``rss`` the process's resident bytes before the first
    trainer and after each one is built.
    """
    import torch
    from transformers import AutoTokenizer

    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.engines import create_engine
    from openclaw_trl.run_parts import SharedParts, prepare_start
    from openclaw_trl.runtime import build_user
    from openclaw_trl.trainer.sharing import SharedBase, UpdateTurns
    from openclaw_trl.users import UserSpec, user_args, user_plan

    peft_config = lora_config(lora_r)
    engine = create_engine("hf", model_dir, lora_config=peft_config, max_adapters=n, prefix_cache_mb=0)
    shared = SharedBase.load(str(model_dir), "cpu", dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    turns = UpdateTurns()
    parts = SharedParts(str(model_dir), tokenizer, engine, peft_config, base=shared, turns=turns)
    users, rss = [], [rss_bytes()]
    for i in range(n):
        name = f"u{i}"
        config = OpenClawConfig(**openclaw_args(geometry, updates[i], tmp))  # user i's max_steps
        plan = user_plan(config, UserSpec(name, f"{name.upper()}_KEY"))
        args = user_args(config, plan, model_init_kwargs=None)  # the model is the shared base's copy
        built = build_user(args, plan, parts, *prepare_start(args))
        trainer = built.trainer
        trainer.sample_timeout = PHASE_TIMEOUT_S
        counter = UpdateCount()
        trainer.add_callback(counter.callback)
        users.append(User(name, trainer, built.store, counter))
        rss.append(rss_bytes())
    return shared, engine, turns, users, rss


def start(users: list[User]) -> None:
    """One training thread per user (as ``run_training.train_users``); each waits for samples in its store."""

    def train(user: User) -> None:
        try:
            user.trainer.train()
        except BaseException as err:  # noqa: BLE001 - reported by the phase that waits for this user
            user.error = err
        finally:
            user.trainer.end_turn()

    for user in users:
        user.thread = threading.Thread(target=train, args=(user,), name=f"train-{user.name}", daemon=True)
        user.thread.start()


def feed(user: User, batches: int, geometry: dict, vocab: int) -> None:
    """``batches`` judged batches into ``user``'s store, each sample tagged with the update that consumes it."""
    size = geometry["batch"]
    samples = make_samples(batches * size, geometry, vocab, seed=1000 * user.fed + int(user.name[1:]))
    for i, sample in enumerate(samples):
        version = user.fed + i // size
        user.store.queue.add_sample(
            dataclasses.replace(sample, turn_id=user.fed * size + i + 1, policy_version=version)
        )
    user.fed += batches


def phase(users: list[User], who: list[User], batches: int, geometry: dict, vocab: int) -> float:
    """Feed ``batches`` to each of ``who`` at once, wait until each has trained them; returns the wall seconds."""
    targets = {u.name: u.counter.done + batches for u in who}
    t0 = time.perf_counter()
    for user in who:
        feed(user, batches, geometry, vocab)
    for user in who:
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        with user.counter.cond:
            while user.counter.done < targets[user.name]:
                dead = [u for u in users if u.error is not None or not u.thread.is_alive()]
                if dead and any(u.counter.done < u.trainer.args.max_steps for u in dead):
                    err = dead[0].error
                    raise RuntimeError(f"trainer {dead[0].name} stopped: {err!r}") from err
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{user.name} did not finish its updates in {PHASE_TIMEOUT_S:.0f}s")
                user.counter.cond.wait(0.5)
    return time.perf_counter() - t0


def update_logs(trainer) -> list[dict]:
    """One entry per update of ``trainer``: its ``time/update_s`` and ``schedule/turn_wait_s``."""
    return [
        {"update_s": e["time/update_s"], "turn_wait_s": e.get("schedule/turn_wait_s", 0.0)}
        for e in trainer.state.log_history
        if "time/update_s" in e
    ]


def max_streak(order: list[str], batches: dict[str, int]) -> int:
    """The longest run of consecutive updates of one user while another still had a batch waiting.

    ``order``: whose updates ran (``UpdateTurns.order``) in a shared phase; ``batches``: how many each user was
    fed at its start (all ready from then on). A fair schedule gives 1.
    """
    left, best, streak, last = dict(batches), 0, 0, None
    for name in order:
        others_ready = any(n != name and k > 0 for n, k in left.items())
        streak = streak + 1 if name == last else 1
        if others_ready:
            best = max(best, streak)
        last = name
        left[name] = left.get(name, 0) - 1
    return best


def memory(shared, engine, users: list[User], rss: list[int]) -> dict:
    """Bytes per extra user, from the tensors, and the RSS added by each trainer after the first."""
    trainer = users[-1].trainer
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    adam = [t for s in trainer.optimizer.state.values() for t in s.values() if hasattr(t, "numel")]
    base = tensor_bytes(shared.model.parameters()) + tensor_bytes(shared.model.buffers())
    slots = engine.model._param_maps  # slot name -> its LoRA parameters (hf_model.SlottedModel)
    slot = tensor_bytes(next(iter(slots.values())).values())
    cpu_copy = tensor_bytes(engine.model._slots._latest[users[-1].name].weights.values())
    extra = [b - a for a, b in zip(rss[1:-1], rss[2:])]  # each trainer after the first
    out = {
        "base_bytes": base,
        "lora_param_bytes": tensor_bytes(trainable),
        "grad_bytes": tensor_bytes(trainable),  # float32 gradients of the trainable tensors, during an update
        "adam_bytes": tensor_bytes(adam),
        "trainer_rss_delta_bytes": sum(extra) / len(extra) if extra else None,
        "engine_slot_bytes": slot,
        "engine_cpu_copy_bytes": cpu_copy,
        "engine_slots": len(slots),
    }
    out["trainer_tensor_bytes"] = out["lora_param_bytes"] + out["grad_bytes"] + out["adam_bytes"]
    out["engine_bytes"] = slot + cpu_copy
    for key in ("trainer_tensor_bytes", "trainer_rss_delta_bytes", "engine_bytes"):
        out[key.replace("_bytes", "_over_base")] = None if out[key] is None else out[key] / base
    return out
