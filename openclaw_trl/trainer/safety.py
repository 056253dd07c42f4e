"""The trainer's side of the version guard (``trainer.guard``): check each update before it is served, and rewind a
held-back one.

After every optimizer step, before the new adapter is published (``callbacks.PublishAndConsume``):

1. ``check_candidate`` compares the trained weights' next-token distributions with the reference's (the base,
   adapter switched off; for a row it does not explain, also the base told the person's hints) on the guard's
   rows (and, once per run, samples the neutral rows' replies from the base). The reference's side of a row is
   computed the first time the row is checked and kept while it stays one of the rows
   (``trainer.guard_reference``), so a check mostly runs the candidate alone; the main process decides, every
   process gets the same verdict;
2. a version that passes is published as usual and becomes the *last good* state (``GoodState``: the adapter's
   tensors, the optimizer and scheduler states, kept in memory);
3. a version that does not pass is held back (``hold_back``): every process loads the last good state back (the
   weights and the optimizer: the next update starts from where the served version was, without the momentum
   that led astray) and those weights are published under the step's number, their lineage parent the last good
   version with 0 updates (a version number names one set of weights; the person keeps being served what they
   were served). The samples the held-back update consumed are kept out of training (``rolled_back``, with the
   reason), as after a rollback: training on them again would likely redo the same step.

A check that runs out of device memory is run once more after the allocator's cache is given back; if it runs
out again, the version is held back (step 3) with the reason ``out of memory during the check``: it is not
served unchecked, and training goes on.

The checks run in evaluation mode (no dropout) with no gradient, on the model the trainer trains, so they work
with every serving engine; their cost is logged as ``guard/seconds`` beside ``time/update_s``.
"""

from __future__ import annotations

import copy
import logging
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from openclaw_trl.trainer.guard import Comparison, GuardVerdict, ProbeRow, VersionGuard
from openclaw_trl.trainer.guard_reference import ReferenceCache, comparison, row_signals

logger = logging.getLogger(__name__)


PADDING_BUDGET = 1e9
"""Padded tokens times model parameters that cost about as much as one more forward's fixed cost on a CPU
(a 1M-parameter model: 1,000 tokens; a 0.6B one: 2)."""


def _dropouts(model) -> list[torch.nn.Module]:
    """The model's dropout layers that drop anything."""
    return [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]


@contextmanager
def _inference(model, dropouts: list | None = None):
    """The PEFT model in inference mode for the block, cheaply: dropout off (the checks compare distributions,
    not noisy samples of them) and the PEFT wrappers' own ``training`` flag off, instead of ``model.eval()`` /
    ``train()``, which walk every module of the model twice per check. The layers compute the same either
    way."""
    flagged = [m for m in (model, getattr(model, "base_model", None)) if m is not None and m.training]
    if dropouts is None:
        dropouts = _dropouts(model)
    dropouts = [m for m in dropouts if m.training]
    for m in flagged:
        m.training = False
    for m in dropouts:
        m.train(False)
    try:
        yield
    finally:
        for m in flagged:
            m.training = True
        for m in dropouts:
            m.train(True)


def _snapshot(state):
    """A copy of an optimizer's or scheduler's state dict that shares nothing with it: tensors cloned, dicts,
    lists and tuples rebuilt, anything else deep-copied (``copy.deepcopy`` of the whole, without its per-object
    bookkeeping over every tensor)."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {key: _snapshot(value) for key, value in state.items()}
    if type(state) in (list, tuple):
        return type(state)(_snapshot(value) for value in state)
    return copy.deepcopy(state)


@dataclass
class GoodState:
    """The last version that passed the guard: its number, adapter tensors, optimizer and scheduler states."""

    version: int
    params: dict[str, torch.Tensor]
    optimizer: dict | None
    scheduler: dict | None


def make_guard(trainer, args) -> VersionGuard:
    """The ``VersionGuard`` of ``trainer`` from its config (``args.guard_config()``): prompts rendered with the
    trainer's chat template, recent turns and hints from its store. The base model is the guard's reference, so
    it needs an adapter to switch off (a LoRA run)."""
    from openclaw_trl.chat import render_prompt_ids
    from openclaw_trl.errors import UserError

    if not hasattr(trainer.accelerator.unwrap_model(trainer.model), "disable_adapter"):
        raise UserError(
            "guard: the version guard compares each new version with the base model, which full fine-tuning "
            "overwrites: train a LoRA adapter (use_peft: true), or set guard: false"
        )
    store, tokenizer = trainer.store, trainer.processing_class
    return VersionGuard(
        args.guard_config(),
        render=lambda messages, tools: render_prompt_ids(tokenizer, messages, tools),
        recent_turns=store.queries.recent_prompt_turns if store is not None else (lambda n: []),
        recent_hints=store.queries.recent_hints if store is not None else (lambda n: []),
    )


class TrainerSafety:
    """A mixin of ``OpenClawTrainer``: ``guard`` (a ``VersionGuard`` or None) and the last good state."""

    guard: VersionGuard | None = None
    _good: GoodState | None = None
    _held_from: int | None = None  # the version whose weights the step's checkpoint holds (a held-back step)
    _references: ReferenceCache | None = None  # the base's side of the rows checked
    _parts: tuple | None = (
        None  # (model, trainable parameters, dropout layers, parameter count): _model_parts
    )

    # ------------------------------------------------------------------ checking
    def check_candidate(self) -> GuardVerdict:
        """The guard's verdict on the weights just trained (passed when there is no guard); every process."""
        from openclaw_trl.trainer.versions import main_value

        if self.guard is None:
            return GuardVerdict(True)
        params = list(self._trainable_params().values())
        finite = bool(torch.stack([torch.isfinite(p).all() for p in params]).all()) if params else True
        return main_value(self.accelerator, lambda: self._run_check(finite))

    def _run_check(self, finite: bool) -> GuardVerdict:
        """The check, run again once if the device runs out of memory in it (after giving the allocator's
        cached memory back); a second time, the version is held back with that reason: a version nobody could
        check is not served, and training goes on."""
        from accelerate.utils.memory import clear_device_cache

        from openclaw_trl.engines.out_of_memory import is_out_of_memory
        from openclaw_trl.trainer.out_of_memory import first_line

        for attempt in (1, 2):
            try:
                model = self.accelerator.unwrap_model(self.model)
                with torch.no_grad(), _inference(model, self._model_parts(model)[1]):
                    return self.guard.check(self.guard.rows(self._generate_base), self._compare, finite)
            except Exception as err:
                if not is_out_of_memory(err):
                    raise
                error = first_line(err)
                clear_device_cache(garbage_collection=True)
                logger.warning(
                    "the version guard ran out of memory checking update %d (try %d of 2): %s",
                    self.state.global_step,
                    attempt,
                    error,
                )
        return GuardVerdict(False, reason=f"out of memory during the check ({error})")

    def _model_parts(self, model) -> tuple[dict[str, torch.nn.Parameter], list[torch.nn.Module], int]:
        """The model's trainable parameters, dropout layers and parameter count, found once per model (a walk
        over every module costs more than a toy model's check)."""
        if self._parts is None or self._parts[0] is not model:
            trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
            size = sum(p.numel() for p in model.parameters())
            self._parts = (model, trainable, _dropouts(model), size)
        return self._parts[1:]

    def _compare(self, rows: list[ProbeRow]) -> Comparison:
        """The largest per-row mean KL(candidate || reference), the largest mass moved onto implausible tokens
        and both entropies over every reply position of ``rows`` (module docstring of ``trainer.guard``), from
        the full next-token distributions at the trainer's temperature. The candidate runs once over every
        row; the base's side of a row comes from ``ReferenceCache`` (computed the first time the row is
        checked). The base told the hints is only asked for on rows the plain base does not explain (a signal
        past its bound); a row's distances are then the smaller of the two references'."""
        model = self.accelerator.unwrap_model(self.model)
        if self._references is None:
            self._references = ReferenceCache()

        def base(prompts, replies):
            with model.disable_adapter():
                return self._row_logps(model, prompts, replies)

        plain = self._references.plain(rows, self.temperature, base)
        candidate = self._row_logps(model, [r.prompt_ids for r in rows], [r.reply_ids for r in rows])
        signals = [row_signals(c, ref) for c, ref in zip(candidate, plain)]
        bounds = self.guard.config
        told = [
            i
            for i, (r, s) in enumerate(zip(rows, signals))
            if r.reference_ids != r.prompt_ids
            and (s.kl > bounds.max_kl or s.implausible > bounds.max_implausible)
        ]
        if told:
            mixed = self._references.mixed([rows[i] for i in told], self.temperature, base)
            for i, reference in zip(told, mixed):
                signals[i] = signals[i].closer(row_signals(candidate[i], reference, plain[i]))
        return comparison(signals)

    def _row_logps(self, model, prompts: list, replies: list) -> list[torch.Tensor]:
        """Per row, ``log_softmax(logits / T)`` at the positions that predict its reply ``[reply tokens,
        vocabulary]``, float32. One forward for all rows; on a CPU, where a padded token costs as much as a real
        one, a row whose padding to the longest one's length would cost more than a forward's fixed cost
        (``PADDING_BUDGET``) starts a forward of its own, with the rows shorter still."""
        lengths = [len(p) + len(r) for p, r in zip(prompts, replies)]
        order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
        budget = (
            PADDING_BUDGET / self._model_parts(model)[2] if self.accelerator.device.type == "cpu" else None
        )
        groups = [[order[0]]] if order else []
        for i in order[1:]:
            if budget is not None and lengths[groups[-1][0]] - lengths[i] > budget:
                groups.append([i])
            else:
                groups[-1].append(i)
        out: list[torch.Tensor | None] = [None] * len(prompts)
        for group in groups:
            logps, _ = self._reply_distributions(
                model, [ProbeRow(tuple(prompts[i]), (), tuple(replies[i]), "") for i in group]
            )
            for row, i in enumerate(group):
                out[i] = logps[row, : len(replies[i])]
        return out

    def _reply_distributions(
        self, model, rows: list[ProbeRow], reference_from: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_softmax(logits / T) [rows, C, vocab], mask [rows, C])`` at the positions that predict each
        row's reply tokens, from one forward (prompts left-padded, replies right-padded, as TRL lays a batch
        out). Rows from ``reference_from`` on are given their ``reference_ids`` as prompt, the others their
        ``prompt_ids``."""
        first = len(rows) if reference_from is None else reference_from
        prompts = [r.reference_ids if i >= first else r.prompt_ids for i, r in enumerate(rows)]
        pad, device = self.processing_class.pad_token_id, self.accelerator.device
        left, width = max(len(p) for p in prompts), max(len(r.reply_ids) for r in rows)
        ids, attention = [], []
        for prompt, row in zip(prompts, rows):
            before, after = left - len(prompt), width - len(row.reply_ids)
            ids.append([pad] * before + list(prompt) + list(row.reply_ids) + [pad] * after)
            attention.append([0] * before + [1] * (len(prompt) + len(row.reply_ids)) + [0] * after)
        attention = torch.tensor(attention, device=device)
        logits = model(
            input_ids=torch.tensor(ids, device=device), attention_mask=attention, logits_to_keep=width + 1
        ).logits
        logits = logits[:, :-1].float() / self.temperature
        return torch.log_softmax(logits, dim=-1), attention[:, left:].to(logits.dtype)

    def _generate_base(self, prompts, max_new_tokens: int, seed: int) -> list[list[int]]:
        """One reply per prompt sampled from the base (adapter off) at the trainer's temperature, seeded."""
        model = self.accelerator.unwrap_model(self.model)
        eos = self.processing_class.eos_token_id
        replies = []
        with torch.random.fork_rng(devices=[]), model.disable_adapter():
            torch.manual_seed(seed)
            for prompt in prompts:
                ids = torch.tensor([list(prompt)], device=self.accelerator.device)
                out = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    temperature=self.temperature,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=self.processing_class.pad_token_id,
                    eos_token_id=eos,
                )
                replies.append([int(t) for t in out[0, ids.size(1) :]])
        return replies

    # ------------------------------------------------------------------ the last good state
    def _trainable_params(self) -> dict[str, torch.nn.Parameter]:
        return self._model_parts(self.accelerator.unwrap_model(self.model))[0]

    def remember_good(self) -> None:
        """The current weights, optimizer and scheduler become the last good state (every process)."""
        if self.guard is None:
            return
        optimizer = getattr(self, "optimizer", None)
        scheduler = getattr(self, "lr_scheduler", None)
        self._good = GoodState(
            self.state.global_step,
            {name: p.detach().clone() for name, p in self._trainable_params().items()},
            _snapshot(optimizer.state_dict()) if optimizer is not None else None,
            _snapshot(scheduler.state_dict()) if scheduler is not None else None,
        )

    def hold_back(self, verdict: GuardVerdict) -> int:
        """Rewind to the last good state and serve its weights as this step's version (module docstring);
        returns the version kept. Every process."""
        from openclaw_trl.trainer.versions import follow_global_step

        good, step = self._good, self.state.global_step
        with torch.no_grad():
            for name, param in self._trainable_params().items():
                param.copy_(good.params[name])
        if good.optimizer is not None:
            self.optimizer.load_state_dict(_snapshot(good.optimizer))
        if good.scheduler is not None and getattr(self, "lr_scheduler", None) is not None:
            self.lr_scheduler.load_state_dict(_snapshot(good.scheduler))
            follow_global_step(self.lr_scheduler, step)
        self._held_from = good.version
        self.publish(parent=good.version, updates=0, note=f"held: {verdict.reason}")
        logger.warning(
            "update %d was held back: %s. Version %d keeps serving (as v%d); training goes on from it",
            step,
            verdict.reason,
            good.version,
            step,
        )
        return good.version

    def take_held_from(self) -> int | None:
        """The version a held-back step's checkpoint holds (once: the checkpoint of that step reads it)."""
        held, self._held_from = self._held_from, None
        return held
