"""The trainer's side of the version guard (``trainer.guard``): check each update before it is served, and rewind a
held-back one.

After every optimizer step, before the new adapter is published (``callbacks.PublishAndConsume``):

1. ``check_candidate`` compares the trained weights' next-token distributions with the reference's (the base,
   adapter switched off; for a row it does not explain, also the base told the person's hints) on the guard's
   rows (and, once per run, samples the neutral rows' replies from the base); the main process decides, every
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
import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from openclaw_trl.records import TrainingSample
from openclaw_trl.trainer.guard import IMPLAUSIBLE_LOGP, Comparison, GuardVerdict, ProbeRow, VersionGuard

logger = logging.getLogger(__name__)


def _mixture(plain: torch.Tensor, hinted: torch.Tensor) -> torch.Tensor:
    """Log-probs of the even mixture of the base on the plain prompt and on the hinted one: a continuation is
    plausible when either finds it so (the model as it was, or the model told what the person asked for)."""
    return torch.logsumexp(torch.stack([plain, hinted]), dim=0) - math.log(2.0)


def _row_kl(
    probs: torch.Tensor, candidate: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``[rows]``: the mean over each row's reply positions of KL(candidate || reference), exact (``probs`` is
    ``candidate.exp()``, computed once by the caller)."""
    kl = (probs * (candidate - reference)).sum(-1)
    return (kl * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def _row_implausible(probs: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[rows]``: the largest, over each row's reply positions, probability mass the candidate (``probs``) moved
    onto tokens the reference finds implausible, ``sum_v (p_cand(v) - p_ref(v)) * 1[log p_ref(v) <
    IMPLAUSIBLE_LOGP]``."""
    tail = reference < IMPLAUSIBLE_LOGP
    moved = ((probs - reference.exp()) * tail).sum(-1)
    return (moved * mask).amax(-1)


def _widen(logps: torch.Tensor, width: int) -> torch.Tensor:
    """``[rows, C, V]`` log-probs padded with zeros to ``C = width`` (positions past a reply are masked)."""
    if logps.size(1) >= width:
        return logps[:, :width]
    pad = logps.new_zeros(logps.size(0), width - logps.size(1), logps.size(2))
    return torch.cat([logps, pad], dim=1)


@contextmanager
def _inference(model):
    """The PEFT model in inference mode for the block, cheaply: dropout off (the checks compare distributions,
    not noisy samples of them) and the PEFT wrappers' own ``training`` flag off (PEFT takes per-row
    ``adapter_names`` only then), instead of ``model.eval()`` / ``train()``, which walk every module of the
    model twice per check. The layers compute the same either way."""
    flagged = [m for m in (model, getattr(model, "base_model", None)) if m is not None and m.training]
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0 and m.training]
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
    _neutral_reference: tuple[list, torch.Tensor] | None = None  # the base's side of the neutral rows

    # ------------------------------------------------------------------ checking
    def check_candidate(self) -> GuardVerdict:
        """The guard's verdict on the weights just trained (passed when there is no guard); every process."""
        from openclaw_trl.trainer.versions import main_value

        if self.guard is None:
            return GuardVerdict(True)
        finite = all(bool(torch.isfinite(p).all()) for p in self._trainable_params().values())
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
                with torch.no_grad(), _inference(self.accelerator.unwrap_model(self.model)):
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

    def _compare(self, rows: list[ProbeRow]) -> Comparison:
        """The largest per-row mean KL(candidate || reference), the largest mass moved onto implausible tokens
        and both entropies over every reply position of ``rows`` (module docstring of ``trainer.guard``), from
        the full next-token distributions at the trainer's temperature. One forward runs every row with the
        adapter on and the recent rows with it off (PEFT's per-row adapter names); the base's side of the
        neutral rows never changes, so it is computed once. The base told the hints is only run for rows the
        plain base does not explain (a signal past its bound); a row's signals are then the smaller of the two
        references'."""
        model = self.accelerator.unwrap_model(self.model)
        recent = [r for r in rows if r.kind != "neutral"]
        neutral = [r for r in rows if r.kind == "neutral"]
        if neutral and (self._neutral_reference is None or self._neutral_reference[0] != neutral):
            plain_neutral = self._reply_distributions(model, neutral, ["__base__"] * len(neutral))[0]
            self._neutral_reference = (neutral, plain_neutral)
        n, k = len(rows), len(recent)
        found, mask = self._reply_distributions(
            model, rows + recent, [model.active_adapter] * n + ["__base__"] * k
        )
        candidate, mask = found[:n], mask[:n]
        parts = [found[n:]] + ([_widen(self._neutral_reference[1], found.size(1))] if neutral else [])
        plain = torch.cat(parts)  # rows are recent first, then neutral (VersionGuard.rows)
        bounds = self.guard.config
        probs = candidate.exp()
        per_row = _row_kl(probs, candidate, plain, mask)
        implausible = _row_implausible(probs, plain, mask)
        hinted_rows = [
            i
            for i, r in enumerate(rows)
            if r.reference_ids != r.prompt_ids
            and (per_row[i] > bounds.max_kl or implausible[i] > bounds.max_implausible)
        ]
        if hinted_rows:
            told = [rows[i] for i in hinted_rows]
            hinted = self._reply_distributions(model, told, ["__base__"] * len(told), reference_from=0)[0]
            mixed = _mixture(plain[hinted_rows], _widen(hinted, plain.size(1)))
            told_probs, told_mask = probs[hinted_rows], mask[hinted_rows]
            per_row[hinted_rows] = torch.minimum(
                per_row[hinted_rows], _row_kl(told_probs, candidate[hinted_rows], mixed, told_mask)
            )
            implausible[hinted_rows] = torch.minimum(
                implausible[hinted_rows], _row_implausible(told_probs, mixed, told_mask)
            )
        entropy_candidate = -(probs * candidate).sum(-1)
        entropy_reference = -(plain.exp() * plain).sum(-1)
        count = mask.sum().clamp(min=1)

        def mean(values: torch.Tensor) -> float:
            return float((values * mask).sum() / count)

        return Comparison(
            float(per_row.max()),
            mean(entropy_candidate),
            mean(entropy_reference),
            int(mask.sum()),
            float(implausible.max()),
        )

    def _reply_distributions(
        self,
        model,
        rows: list[ProbeRow],
        adapter_names: list[str] | None = None,
        reference_from: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_softmax(logits / T) [rows, C, vocab], mask [rows, C])`` at the positions that predict each
        row's reply tokens (prompts left-padded, replies right-padded, as TRL lays a batch out). Rows from
        ``reference_from`` on are given their ``reference_ids`` as prompt, the others their ``prompt_ids``;
        ``adapter_names``: per row, PEFT's adapter name or ``"__base__"`` (the adapter off)."""
        from openclaw_trl.trainer.batches import collate_samples, prompt_and_completion

        first = len(rows) if reference_from is None else reference_from
        samples = [
            TrainingSample(
                turn_id=0,
                prompt_ids=list(r.reference_ids if i >= first else r.prompt_ids),
                completion_ids=list(r.reply_ids),
                sampling_logprobs=[0.0] * len(r.reply_ids),
                temperature=self.temperature,
                policy_version=0,
                reward=0.0,
            )
            for i, r in enumerate(rows)
        ]
        batch = collate_samples(samples, self.processing_class.pad_token_id, device=self.accelerator.device)
        mask = batch["completion_mask"]
        input_ids, attention = prompt_and_completion(
            batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], mask
        )
        width = batch["completion_ids"].size(1)
        extra = {"adapter_names": adapter_names} if adapter_names is not None else {}
        logits = model(
            input_ids=input_ids, attention_mask=attention, logits_to_keep=width + 1, **extra
        ).logits
        logits = logits[:, :-1].float() / self.temperature
        return torch.log_softmax(logits, dim=-1), mask.to(logits.dtype)

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
        model = self.accelerator.unwrap_model(self.model)
        return {name: p for name, p in model.named_parameters() if p.requires_grad}

    def remember_good(self) -> None:
        """The current weights, optimizer and scheduler become the last good state (every process)."""
        if self.guard is None:
            return
        optimizer = getattr(self, "optimizer", None)
        scheduler = getattr(self, "lr_scheduler", None)
        self._good = GoodState(
            self.state.global_step,
            {name: p.detach().clone() for name, p in self._trainable_params().items()},
            copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None,
            copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None,
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
            self.optimizer.load_state_dict(copy.deepcopy(good.optimizer))
        if good.scheduler is not None and getattr(self, "lr_scheduler", None) is not None:
            self.lr_scheduler.load_state_dict(copy.deepcopy(good.scheduler))
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
