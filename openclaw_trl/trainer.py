"""``OpenClawTrainer``: TRL's ``GRPOTrainer`` fed with judged live turns instead of generated rollouts.

What it overrides, and nothing else:

* where a batch comes from: ``_generate_and_score_completions`` takes the next ``batch_size`` judged
  samples from the store (blocking until they exist; surplus samples stay queued) and builds the
  prompt/completion tensors from the stored token ids;
* how advantages are built: ``losses.combined_advantages`` gives the per-token
  ``A = w_rl * r + w_opd * opd_mask * (lp_T - lp_old)``; TRL's ``_compute_loss`` then applies the PPO
  clip (``epsilon`` / ``epsilon_high``) and aggregates as ``loss_type`` says, adds its KL term when
  ``beta > 0`` (the reference log-probs come from the policy with its adapter disabled, as TRL does with
  PEFT) and sees a zero mask on truncated completions when ``mask_truncated_completions`` is on (from the
  stored ``finish_reason``);
* what happens after an optimizer step: the adapter is published to the serving engine (policy
  version + 1) and, once a batch's last step is done, its samples are marked consumed with the step.

``lp_old`` in the OPD term is the sampling log-prob returned by the engine: the teacher was scored by
the same engine, so engine numerics cancel in ``lp_T - lp_old``. When a batch is stale (sampled by an
older adapter), sampled at another temperature, or reused for several passes (``num_iterations``),
the old log-probs of the PPO ratio are recomputed with the weights at the start of the update and a
truncated importance weight ``min(pi_old / pi_sampling, C)`` is folded into the advantage; since the
weight is positive, ``-min(r*A*w, clip(r)*A*w) = w * -min(r*A, clip(r)*A)``: the same correction TRL
applies for vLLM. On-policy single-pass batches skip the recomputation (ratio = 1); stale single-pass
batches skip it too: with one optimizer step per batch the log-probs of the loss forward itself are the old
log-probs, so the IS weight is computed there, per micro-batch, before TRL reads the advantages.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import use_adapter

from openclaw_trl.fsutil import RUN_INFO_FILE
from openclaw_trl.losses import combined_advantages, masked_mean, topk_distillation_loss
from openclaw_trl.records import TrainingSample

logger = logging.getLogger(__name__)


class OpenClawTrainer(GRPOTrainer):
    _tag_names = ["trl", "openclaw-trl", "online-rl", "on-policy-distillation"]
    _name = "OpenClaw"

    def __init__(
        self,
        model,
        args: GRPOConfig,  # an OpenClawConfig: the GRPOConfig fields plus the openclaw-trl ones
        store,
        engine=None,
        processing_class=None,
        peft_config=None,
        callbacks=None,
        sample_timeout: float | None = None,
        recipe_yaml: str | None = None,
    ):
        # The data come from the store; the dataset only drives TRL's loop (one row per sample slot).
        placeholder = Dataset.from_dict({"prompt": [""] * args.generation_batch_size})
        super().__init__(
            model=model,
            reward_funcs=judged_reward,
            args=args,
            train_dataset=placeholder,
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=callbacks,
        )
        self.store = store
        self.engine = engine
        self.sample_timeout = sample_timeout
        self.recipe_yaml = recipe_yaml
        self._batch_sample_ids: list[int] = []
        self._batch_turn_ids: list[int] = []
        self._batch_off_policy = False
        self._updates_left_in_batch = 0
        self._last_logps: torch.Tensor | None = None
        self._adapter_snapshot = AdapterSnapshot()
        self._loss_inputs: dict | None = None  # the micro-batch inside compute_loss (for the IS weight)
        self._update_started = time.perf_counter()
        self.samples_used = 0
        self.turns_used: set[int] = set()
        self.add_callback(_PublishAndConsume(self))
        self._check_kd_teacher()

    # ------------------------------------------------------------------ batches
    def _take_batch(self) -> list[TrainingSample]:
        """This process's slice of the next ``generation_batch_size`` samples.

        The main process takes the batch from the store and shares it; process ``i`` of ``n`` trains on
        samples ``[i * b / n, (i + 1) * b / n)``, as TRL slices its generation batch (``process_slice``).
        ``_batch_sample_ids`` / ``_batch_turn_ids`` keep the whole batch: it is consumed once it is trained.
        """
        from accelerate.utils import broadcast_object_list

        holder = [None]
        started = time.perf_counter()
        if self.accelerator.is_main_process:
            samples = self.store.wait_for_samples(
                self.args.generation_batch_size, timeout=self.sample_timeout
            )
            if len(samples) < self.args.generation_batch_size:
                raise TimeoutError(
                    f"only {len(samples)} of {self.args.generation_batch_size} judged samples arrived within "
                    f"{self.sample_timeout}s; they stay queued for the next run"
                )
            holder = [samples]
        if self.accelerator.num_processes > 1:
            broadcast_object_list(holder)
        # TRL's step_time includes this wait for people to chat; time/update_s below does not.
        self._update_started = time.perf_counter()
        self._log("samples/wait_s", self._update_started - started)
        samples = holder[0]
        self._batch_sample_ids = [s.sample_id for s in samples]
        self._batch_turn_ids = [s.turn_id for s in samples]
        # Decided on the whole batch, so every process takes the same branch (the same forwards).
        self._batch_off_policy = any(
            s.policy_version != self.state.global_step or abs(s.temperature - self.temperature) > 1e-6
            for s in samples
        )
        share = len(samples) // self.accelerator.num_processes
        rank = self.accelerator.process_index
        return samples[rank * share : (rank + 1) * share]

    def _generate_and_score_completions(self, inputs):
        samples = self._take_batch()
        device = self.accelerator.device
        updates_per_batch = self.num_iterations * self.args.steps_per_generation
        self._updates_left_in_batch = max(1, updates_per_batch // self.args.gradient_accumulation_steps)

        batch = collate_samples(samples, pad_token_id=self.processing_class.pad_token_id, device=device)
        mask = batch["completion_mask"]
        if self.mask_truncated_completions:  # as TRL: out of the attention and the loss
            mask = mask * (~batch["truncated"]).unsqueeze(1).to(mask.dtype)
        advantages = combined_advantages(
            batch["rewards"],
            batch["teacher_logprobs"],
            batch["sampling_logprobs"],
            mask,
            batch["opd_mask"],
            w_rl=self.args.w_rl,
            w_opd=self.args.w_opd,
        )

        out = {
            "prompt_ids": batch["prompt_ids"],
            "prompt_mask": batch["prompt_mask"],
            "completion_ids": batch["completion_ids"],
            "completion_mask": mask,
            "num_items_in_batch": self.accelerator.gather(mask.sum()).sum(),  # every process's tokens (TRL)
        }
        off_policy = self._batch_off_policy
        correct = off_policy and self.args.vllm_importance_sampling_correction
        one_pass = (
            self.num_iterations == 1
            and self.args.steps_per_generation == self.args.gradient_accumulation_steps
        )
        if self.off_policy_mask_threshold is not None:  # TRL's off-policy mask compares with the sampler
            out["sampling_per_token_logps"] = batch["sampling_logprobs"]
        if self.beta != 0.0:
            out["ref_per_token_logps"] = self._reference_logps(batch, mask)
        if correct and one_pass:
            # One optimizer step on this batch: the weights at its start are those of its loss forwards, so the
            # log-probs of that forward are the old log-probs. The IS weight is applied there
            # (_get_per_token_logps_and_entropies) instead of paying a no-grad forward for the same numbers.
            out["is_sampling_logprobs"] = batch["sampling_logprobs"]
        elif self.num_iterations > 1 or correct:
            old = self._no_grad_logps(self.model, batch, mask)
            out["old_per_token_logps"] = old
            if self.args.vllm_importance_sampling_correction:
                weight = truncated_is_weight(
                    old,
                    batch["sampling_logprobs"],
                    mask,
                    self.args.vllm_importance_sampling_mode,
                    self.args.vllm_importance_sampling_clip_min,
                    self.args.vllm_importance_sampling_clip_max,
                )
                advantages = advantages * weight
                self._log(
                    "sampling/importance_sampling_ratio/mean", masked_mean(weight.expand_as(mask), mask)
                )
                diff = (old - batch["sampling_logprobs"]).abs()
                self._log("sampling/sampling_logp_difference/mean", masked_mean(diff, mask))
        out["advantages"] = advantages
        if self.args.w_kd > 0:
            out.update(self._kd_inputs(batch, mask))

        self._log_batch_metrics(
            samples, batch, advantages, mask, log_advantages="is_sampling_logprobs" not in out
        )
        return out

    def _no_grad_logps(self, model, batch, mask) -> torch.Tensor:
        """Per-token log-probs of the batch's completions under ``model`` (no gradient)."""
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model,
                torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
                torch.cat([batch["prompt_mask"], mask], dim=1),
                batch["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
        return logps

    def _reference_logps(self, batch, mask) -> torch.Tensor:
        """Log-probs under TRL's KL reference (``beta``): the separate reference model TRL built for a model
        without PEFT, else the policy with its adapter disabled (TRL's frozen ``ref`` copy of a pretrained one)."""
        if self.ref_model is not None:
            return self._no_grad_logps(self.ref_model, batch, mask)
        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self._no_grad_logps(self.model, batch, mask)

    def _kd_inputs(self, batch, mask) -> dict[str, torch.Tensor]:
        """What the top-K distillation term needs: the teacher's top-K (``kd_topk_source: teacher``) or the
        hint-augmented prompts the teacher is run on (``student``), and the positions it applies to."""
        opd = batch["opd_mask"][:, None].to(mask.dtype)
        if self.args.kd_topk_source == "student":
            return {
                "kd_teacher_prompt_ids": batch["teacher_prompt_ids"],
                "kd_teacher_prompt_mask": batch["teacher_prompt_mask"],
                "kd_mask": mask * opd * batch["has_teacher_prompt"][:, None],
            }
        return {
            "kd_topk_ids": batch["topk_ids"],
            "kd_topk_logprobs": batch["topk_logprobs"],
            "kd_mask": mask * opd * batch["has_topk"][:, None],
        }

    def _log(self, name: str, value) -> None:
        self._metrics["train"][name].append(float(value))

    def _log_batch_metrics(self, samples, batch, advantages, mask, log_advantages: bool = True) -> None:
        opd = batch["opd_mask"]
        opd_adv = (batch["teacher_logprobs"] - batch["sampling_logprobs"]) * mask
        self._log("reward", batch["rewards"].mean())
        self._log("rl/reward_mean", batch["rewards"].mean())
        self._log("rl/nonzero_reward_rate", (batch["rewards"] != 0).float().mean())
        self._log("opd/hint_accept_rate", opd.float().mean())
        if opd.any():
            opd_rows = opd_adv[opd]
            self._log("opd/mean_advantage", masked_mean(opd_rows, mask[opd]))
            self._log("opd/mean_abs_advantage", masked_mean(opd_rows.abs(), mask[opd]))
        if log_advantages:  # else logged per micro-batch once the IS weight is known (_weight_advantages)
            self._log("advantages/mean", masked_mean(advantages, mask))
        lengths = batch["completion_mask"].sum(1).float()
        self._log("completions/mean_length", lengths.mean())
        self._log("completions/clipped_ratio", batch["truncated"].float().mean())
        self._log(
            "samples/staleness",
            sum(self.state.global_step - s.policy_version for s in samples) / len(samples),
        )
        if self.store is not None:  # the main process's
            self._log("samples/waiting", self.store.count_waiting())
            self._log("opd/teacher_failed", self.store.count_teacher_failed())  # turns so far without teacher

    # ------------------------------------------------------------------- loss
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        self._last_logps = logps.detach()
        inputs = self._loss_inputs
        if inputs is not None and "is_sampling_logprobs" in inputs and torch.is_grad_enabled():
            self._weight_advantages(inputs, self._last_logps)  # before _compute_loss reads the advantages
        return logps, entropies, aux

    def _weight_advantages(self, inputs, old: torch.Tensor) -> None:
        """Fold the truncated IS weight ``pi_old / pi_sampling`` into this micro-batch's advantages (once)."""
        sampling = inputs.pop("is_sampling_logprobs")
        mask = inputs["completion_mask"]
        weight = truncated_is_weight(
            old,
            sampling,
            mask,
            self.args.vllm_importance_sampling_mode,
            self.args.vllm_importance_sampling_clip_min,
            self.args.vllm_importance_sampling_clip_max,
        )
        inputs["advantages"] = inputs["advantages"] * weight
        self._log("sampling/importance_sampling_ratio/mean", masked_mean(weight.expand_as(mask), mask))
        self._log("sampling/sampling_logp_difference/mean", masked_mean((old - sampling).abs(), mask))
        self._log("advantages/mean", masked_mean(inputs["advantages"], mask))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        use_kd = self.args.w_kd > 0 and bool(inputs["kd_mask"].any())
        parts = self._policy_body_and_head(model) if use_kd else None
        # With top-K KD on, keep the hidden states of the loss forward: the KD term reuses them (no 2nd pass).
        self._loss_inputs = inputs
        try:
            with _captured_hidden_states(parts[0] if parts else None) as hidden:
                loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._loss_inputs = None
        mask = inputs["completion_mask"]
        if inputs.get("old_per_token_logps") is not None and self._last_logps is not None:
            # KL(old || new), k3 estimator; exactly 0 on the first pass of an on-policy batch.
            delta = self._last_logps - inputs["old_per_token_logps"]
            self._log("kl_old", masked_mean(torch.exp(delta) - delta - 1, mask))
        else:
            self._log("kl_old", 0.0)
        if use_kd:
            kd = self._topk_distillation(model, inputs, parts, hidden)
            self._log("kd/loss", kd.detach())
            loss = loss + self.args.w_kd * kd / self.current_gradient_accumulation_steps
        return loss

    def _policy_body_and_head(self, model):
        """``(transformer body, LM head)`` of the policy, or None when the head applies output scalings
        (soft-capping, logit scales): then the KD term takes the model's own logits instead."""
        base = self.accelerator.unwrap_model(model)
        if hasattr(base, "get_base_model"):
            base = base.get_base_model()
        config = base.config.get_text_config()
        if any(getattr(config, name, None) is not None for name in _HEAD_SCALINGS):
            return None
        body = getattr(base, "base_model", base)
        return None if body is base else (body, base.get_output_embeddings())

    def _topk_distillation(self, model, inputs, parts=None, hidden=()) -> torch.Tensor:
        """Reverse KL over the top-K ids (+ tail), averaged per sample then over the batch.

        Student log-probs need the full-vocabulary log-softmax, but only at the distilled positions: the LM
        head runs on the hidden states of those positions alone, taken from the PPO loss forward when it was
        captured (one forward and one backward for both terms), else from one extra pass of the body. With
        ``kd_topk_source: student`` the support is the student's own top-K at each position (ids taken from
        that same log-softmax, so gradient-free) and the teacher's log-probs on it come from
        ``_teacher_logprobs_on``.
        """
        prompt_len = inputs["prompt_ids"].size(1)
        kd_mask = inputs["kd_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        rows, cols = kd_mask.bool().nonzero(as_tuple=True)  # the N distilled positions
        from_student = self.args.kd_topk_source == "student"
        ids = None if from_student else inputs["kd_topk_ids"][rows, cols]
        if parts is None:
            logits = model(input_ids=input_ids, attention_mask=attention).logits
            # positions predicting completion tokens
            logits = logits[:, prompt_len - 1 : -1][rows, cols] / self.temperature
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            student, ids = (
                logprobs.topk(self.args.kd_topk, dim=-1) if from_student else (logprobs.gather(-1, ids), ids)
            )
        else:
            body, head = parts
            if len(hidden) == 1 and hidden[0].shape[:2] == input_ids.shape and hidden[0].requires_grad:
                states = hidden[0]
            else:  # the loss forward was not seen (another loss path): run the body once more
                states = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
            picked = states[:, prompt_len - 1 : -1][rows, cols]  # [N, H]
            if from_student:
                student, ids = _student_topk(head, picked, self.args.kd_topk, self.temperature)
            else:
                student = _topk_logprobs(head, picked, ids, self.temperature)
        if from_student:
            teacher = self._teacher_logprobs_on(model, inputs, parts, rows, cols, ids)
        else:
            teacher = inputs["kd_topk_logprobs"][rows, cols]
        ones = torch.ones_like(rows)[None]
        per_token = topk_distillation_loss(student[None], teacher[None], ones, cap=self.args.kd_cap)[0]
        per_row = per_token.new_zeros(kd_mask.size(0)).index_add(0, rows, per_token)
        return (per_row / kd_mask.float().sum(-1).clamp(min=1.0)).mean()

    def _teacher_logprobs_on(self, model, inputs, parts, rows, cols, ids) -> torch.Tensor:
        """``log_softmax(teacher logits / T)`` on ``ids`` ``[N, K]`` at the distilled positions (no gradient).

        The teacher is the trainer's model on the hint-augmented prompt followed by the original completion
        ids, with the adapter disabled for ``teacher: base`` and the current one for ``teacher: policy``;
        only the rows that have distilled positions are run.
        """
        used, local = torch.unique(rows, return_inverse=True)
        prompt_len = inputs["kd_teacher_prompt_ids"].size(1)
        input_ids = torch.cat([inputs["kd_teacher_prompt_ids"], inputs["completion_ids"]], dim=1)[used]
        attention = torch.cat([inputs["kd_teacher_prompt_mask"], inputs["completion_mask"]], dim=1)[used]
        with torch.no_grad(), self._teacher_weights(model):
            if parts is None:
                logits = model(input_ids=input_ids, attention_mask=attention).logits
                logits = logits[:, prompt_len - 1 : -1][local, cols] / self.temperature
                return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids)
            body, head = parts
            states = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
            return _topk_logprobs(head, states[:, prompt_len - 1 : -1][local, cols], ids, self.temperature)

    def _teacher_weights(self, model):
        """The teacher's weights for the trainer-side forward: the base model (adapter disabled) or the policy."""
        if self.args.teacher == "policy":
            return nullcontext()
        return use_adapter(self.accelerator.unwrap_model(model), adapter_name=None)

    def _check_kd_teacher(self) -> None:
        uses_base = (
            self.args.w_kd > 0 and self.args.kd_topk_source == "student" and self.args.teacher == "base"
        )
        if uses_base and not hasattr(self.accelerator.unwrap_model(self.model), "disable_adapter"):
            raise ValueError(
                "kd_topk_source: student with teacher: base runs the base model by disabling the LoRA adapter, "
                "and this model has none: set use_peft: true, or use teacher: policy"
            )

    # -------------------------------------------------------- publish / resume
    def publish(self) -> None:
        """Hand the current adapter to the serving engine (atomic swap there), version = global step."""
        if self.engine is None or not self.accelerator.is_main_process:
            return
        state = self._adapter_snapshot(self.accelerator.unwrap_model(self.model))
        started = time.perf_counter()
        self.engine.publish_adapter(state, version=self.state.global_step)
        self._log("publish_time", time.perf_counter() - started)

    def train(self, resume_from_checkpoint=None, **kwargs):
        """TRL's ``train``; first the store is brought back to the step training starts at (the checkpoint's,
        or 0): samples consumed by later updates are queued again, as those step numbers are reused."""
        from openclaw_trl.resume import checkpoint_step, latest_checkpoint

        if resume_from_checkpoint is True:
            resume_from_checkpoint = latest_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"no complete checkpoint in {self.args.output_dir} to resume from")
        step = checkpoint_step(resume_from_checkpoint) if resume_from_checkpoint else 0
        if self.accelerator.is_main_process and self.store is not None:
            requeued = self.store.requeue_after(step)
            if requeued:
                logger.info(
                    "training from step %s: %s samples consumed after it are queued again", step, requeued
                )
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def save_checkpoint(self) -> str | None:
        """Save ``checkpoint-<global step>`` with the Trainer's own save (adapter, optimizer, scheduler, RNG and
        trainer state) unless it exists already; None before the first update. Every process calls it."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        from openclaw_trl.resume import is_complete

        step = self.state.global_step
        path = Path(self.args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{step}"
        if step == 0 or is_complete(path):
            return str(path) if step else None
        self._save_checkpoint(self.model_wrapped, trial=None)
        return str(path)

    def write_run_info(self, output_dir: str | None = None) -> Path:
        """``openclaw_run.json``: what ``openclaw-trl push`` puts in the model card.

        Updates, turns and samples are totals over every process that trained this run (restarts included):
        the step is resumed from the checkpoint and the turns and samples consumed are counted in the store.
        """
        import importlib.metadata as md

        output_dir = Path(output_dir or self.args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        model = self.accelerator.unwrap_model(self.model)
        base = getattr(
            getattr(model, "peft_config", {}).get("default", None), "base_model_name_or_path", None
        )
        last = last_step_metrics(self.state.log_history)
        totals = self.store.training_totals() if self.store is not None else {}
        versions = {}
        for name in ("torch", "transformers", "peft", "trl", "accelerate", "openclaw-trl"):
            try:
                versions[name] = md.version(name)
            except md.PackageNotFoundError:
                pass
        info = {
            "base_model": base or getattr(model.config, "_name_or_path", None),
            "method": self.args.method,
            "recipe_yaml": self.recipe_yaml,
            "num_updates": self.state.global_step,  # resumed runs count on from their checkpoint
            "turns_used": totals.get("turns", len(self.turns_used)),  # the store's: every run on it
            "samples_used": totals.get("samples", self.samples_used),
            "final_metrics": last,
            "load_in_4bit": bool(getattr(model, "is_loaded_in_4bit", False)),
            "library_versions": versions,
        }
        path = output_dir / RUN_INFO_FILE
        path.write_text(json.dumps(info, indent=2, default=str))
        return path

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.accelerator.is_main_process:
            self.write_run_info()


class AdapterSnapshot:
    """Copies of the policy's PEFT adapter tensors (``get_peft_model_state_dict`` keys): what is published.

    ``get_peft_model_state_dict`` walks the model's whole state dict on every call, which costs more than
    copying the adapter itself (3 ms vs 0.1 ms on the tiny model, 24 ms vs 19 ms on the 0.6B one, CPU).
    Its keys and the parameters behind them do not change while a model trains (the optimizer updates them
    in place), so the first call maps each key to its parameter and later calls only copy. When a value is
    not a parameter's own tensor (or the model object changes) it falls back to the full walk.
    """

    def __init__(self):
        self._model = None
        self._params: dict[str, torch.nn.Parameter] | None = None

    def __call__(self, model) -> dict[str, torch.Tensor]:
        if self._params is None or self._model is not model:
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(model)
            by_storage = {(p.data_ptr(), p.shape): p for p in model.parameters()}
            params = {key: by_storage.get((t.data_ptr(), t.shape)) for key, t in state.items()}
            found = all(p is not None for p in params.values())
            self._model, self._params = (model, params) if found else (None, None)
            return {key: t.detach().clone() for key, t in state.items()}
        return {key: p.detach().clone() for key, p in self._params.items()}


# Output scalings some LM heads apply on top of the projection (config attribute names).
_HEAD_SCALINGS = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "output_multiplier",
    "lm_head_multiplier",
)


# Most positions x vocabulary logits the KD term holds at once (256 MB in float32). Beyond that the LM head
# runs in chunks of positions that are recomputed in the backward pass instead of kept: a 16 x 512-token
# batch with a 151,936 vocabulary would otherwise keep about 5 GB of log-probs for its gradient.
KD_LOGITS_ELEMS = 1 << 26


def _topk_logprobs(head, hidden: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(head(hidden) / T)`` over the full vocabulary, gathered on ``ids``: ``[N, H] -> [N, K]``."""

    def block(h, i):
        return torch.log_softmax((head(h) / temperature).float(), dim=-1).gather(-1, i)

    return _head_in_chunks(block, head, hidden, ids)


def _student_topk(head, hidden: torch.Tensor, k: int, temperature: float):
    """The top-``k`` of ``log_softmax(head(hidden) / T)``: ``(log-probs [N, k], ids [N, k])``."""

    def block(h):
        values, ids = torch.log_softmax((head(h) / temperature).float(), dim=-1).topk(k, dim=-1)
        return values, ids

    return _head_in_chunks(block, head, hidden)


def _head_in_chunks(block, head, hidden: torch.Tensor, *row_args):
    """``block(hidden, *row_args)``, in chunks of positions recomputed in the backward pass when the
    vocabulary-wide logits of all positions would exceed ``KD_LOGITS_ELEMS``."""
    chunk = max(1, KD_LOGITS_ELEMS // head.weight.shape[0])
    if hidden.shape[0] <= chunk:
        return block(hidden, *row_args)
    from torch.utils.checkpoint import checkpoint

    run = partial(checkpoint, block, use_reentrant=False) if torch.is_grad_enabled() else block
    parts = [
        run(hidden[s : s + chunk], *(a[s : s + chunk] for a in row_args))
        for s in range(0, hidden.shape[0], chunk)
    ]
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(column) for column in zip(*parts))
    return torch.cat(parts)


@contextmanager
def _captured_hidden_states(body):
    """Collect the last hidden states of every grad-enabled forward of ``body`` inside the block."""
    captured: list[torch.Tensor] = []
    if body is None:
        yield captured
        return

    def hook(module, args, output):
        if torch.is_grad_enabled():
            captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    handle = body.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


class _PublishAndConsume(TrainerCallback):
    """After each optimizer step: publish the adapter; after a batch's last step: mark its samples consumed."""

    def __init__(self, trainer: OpenClawTrainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer.publish()

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        trainer.publish()
        trainer._log("policy_version", state.global_step)  # the version now served
        now = time.perf_counter()
        trainer._log("time/update_s", now - trainer._update_started)
        trainer._update_started = now
        trainer._updates_left_in_batch -= 1
        if trainer._updates_left_in_batch <= 0 and trainer._batch_sample_ids:
            if trainer.accelerator.is_main_process:
                trainer.store.mark_consumed(trainer._batch_sample_ids, state.global_step)
            trainer.samples_used += len(trainer._batch_sample_ids)
            trainer.turns_used.update(trainer._batch_turn_ids)
            trainer._batch_sample_ids = []

    def on_train_end(self, args, state, control, **kwargs):
        if self.trainer.accelerator.is_main_process:
            self.trainer.write_run_info()


def last_step_metrics(log_history: list[dict]) -> dict:
    """The metrics of the last logged update (not the Trainer's end-of-run summary)."""
    for entry in reversed(log_history):
        if "reward" in entry:
            return dict(entry)
    return {}


def judged_reward(prompts=None, completions=None, **kwargs):
    """Rewards come from the judges through the store, not from reward functions.

    ``GRPOTrainer`` requires a reward source at construction; this one is never called because
    ``OpenClawTrainer`` builds its batches (and advantages) itself.
    """
    raise RuntimeError("OpenClawTrainer reads judged rewards from the store; judged_reward is never called")


def collate_samples(
    samples: list[TrainingSample], pad_token_id: int, device="cpu"
) -> dict[str, torch.Tensor]:
    """Pad stored token ids into TRL's layout: prompts left-padded, completions right-padded.

    Rows without teacher log-probs get zeros there (their ``opd_mask`` is False, so the OPD term is 0).
    ``teacher_prompt_ids`` holds the hint-augmented prompts (left-padded; the row's own prompt where none is
    stored, ``has_teacher_prompt`` 0) and ``truncated`` marks completions cut at the token limit.
    """
    n = len(samples)
    p_len = max(len(s.prompt_ids) for s in samples)
    teacher_prompts = [s.teacher_prompt_ids or s.prompt_ids for s in samples]
    t_len = max(len(ids) for ids in teacher_prompts)
    c_len = max(len(s.completion_ids) for s in samples)
    k = max((len(s.topk_ids[0]) for s in samples if s.topk_ids), default=1)
    prompt_ids = torch.full((n, p_len), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, p_len), dtype=torch.long)
    completion_ids = torch.full((n, c_len), pad_token_id, dtype=torch.long)
    completion_mask = torch.zeros((n, c_len), dtype=torch.long)
    sampling = torch.zeros((n, c_len))
    teacher = torch.zeros((n, c_len))
    topk_ids = torch.zeros((n, c_len, k), dtype=torch.long)
    topk_logprobs = torch.zeros((n, c_len, k))
    has_topk = torch.zeros(n, dtype=torch.long)
    teacher_prompt_ids = torch.full((n, t_len), pad_token_id, dtype=torch.long)
    teacher_prompt_mask = torch.zeros((n, t_len), dtype=torch.long)
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        prompt_ids[i, p_len - p :] = torch.tensor(s.prompt_ids)
        prompt_mask[i, p_len - p :] = 1
        completion_ids[i, :c] = torch.tensor(s.completion_ids)
        completion_mask[i, :c] = 1
        sampling[i, :c] = torch.tensor(s.sampling_logprobs[:c])
        if s.has_hint and s.teacher_logprobs is not None:
            teacher[i, :c] = torch.tensor(s.teacher_logprobs[:c])
        if s.has_hint and s.topk_ids:
            topk_ids[i, :c] = torch.tensor(s.topk_ids[:c])
            topk_logprobs[i, :c] = torch.tensor(s.topk_logprobs[:c])
            has_topk[i] = 1
        t = len(teacher_prompts[i])
        teacher_prompt_ids[i, t_len - t :] = torch.tensor(teacher_prompts[i])
        teacher_prompt_mask[i, t_len - t :] = 1
    tensors = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "sampling_logprobs": sampling,
        "teacher_logprobs": teacher,
        "rewards": torch.tensor([float(s.reward) for s in samples]),
        "opd_mask": torch.tensor([bool(s.has_hint and s.teacher_logprobs is not None) for s in samples]),
        "topk_ids": topk_ids,
        "topk_logprobs": topk_logprobs,
        "has_topk": has_topk,
        "teacher_prompt_ids": teacher_prompt_ids,
        "teacher_prompt_mask": teacher_prompt_mask,
        "has_teacher_prompt": torch.tensor([int(s.has_hint and bool(s.teacher_prompt_ids)) for s in samples]),
        "truncated": torch.tensor([s.finish_reason == "length" for s in samples]),
    }
    return {name: t.to(device) for name, t in tensors.items()}


def truncated_is_weight(old, sampling, mask, mode: str, clip_min: float | None, clip_max: float | None):
    """Importance weight pi_old / pi_sampling per token (``token_*``) or per sequence (``sequence_*``),
    truncated (``*_truncate``: clamped) or masked (``*_mask``: set to 0 outside [clip_min, clip_max])."""
    log_ratio = (old - sampling) * mask
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True)
    ratio = torch.exp(log_ratio.clamp(max=20.0))
    low = clip_min if clip_min is not None else 0.0
    high = clip_max if clip_max is not None else float("inf")
    if mode.endswith("truncate"):
        return ratio.clamp(min=low, max=high)
    return torch.where((ratio < low) | (ratio > high), torch.zeros_like(ratio), ratio)
