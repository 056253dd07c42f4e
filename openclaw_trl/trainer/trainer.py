"""``OpenClawTrainer``: TRL's ``GRPOTrainer`` fed with judged live turns instead of generated rollouts.

What it overrides, and nothing else:

* where a batch comes from: ``_generate_and_score_completions`` takes the next ``batch_size`` judged
  samples from the store (blocking until they exist; surplus samples stay queued; with ``max_staleness``
  the too-stale ones are dropped, kept in the store with the reason) and builds the
  prompt/completion tensors from the stored token ids;
* how advantages are built: ``losses.combined_advantages`` gives the per-token
  ``A = w_rl * r + w_opd * opd_mask * (lp_T - lp_old)``, where a Best-of-N group sample's ``r`` is its
  group-relative advantage (``losses.group_relative_advantages``: ``r_i - mean(r)`` of its group, scaled as
  ``scale_rewards`` says, the batch std taken over the whole batch of every process) and it has no OPD
  term; a sample's ``weight`` multiplies its row (a served Best-of-N candidate's verdict:
  ``judging.best_of_n``); TRL's ``_compute_loss`` then applies the PPO
  clip (``epsilon`` / ``epsilon_high``) and aggregates as ``loss_type`` says, adds its KL term when
  ``beta > 0`` (the reference log-probs come from the policy with its adapter disabled, as TRL does with
  PEFT) and sees a zero mask on truncated completions when ``mask_truncated_completions`` is on (from the
  stored ``finish_reason``);
* how the per-token log-probs are computed: TRL's fused LM head, run on the completion positions only
  (``trainer.logps``: a 20k-token agent prompt costs no LM head work);
* what the loss adds: with ``w_kd > 0`` the top-K distillation term (``trainer.distill``), computed on the
  hidden states of the PPO loss forward;
* what happens after an optimizer step: the adapter is published to the serving engine (policy
  version + 1) and, once a batch's last step is done, its samples are marked consumed with the step
  (``trainer.callbacks``);
* what the console shows: one line per update instead of transformers' progress bar and metrics dict, and
  every logged metrics dict appended to ``<output_dir>/metrics.jsonl`` (``trainer.reporting``);
* what happens between updates (``learning``, a ``trainer.control.LearningControl``): while learning is
  paused no batch is taken; a rollback request restores an earlier version's checkpoint and publishes it
  as the next policy version (``trainer.versions``); each checkpoint is recorded as an adapter version.

``lp_old`` in the OPD term is the sampling log-prob returned by the engine for an on-policy batch: the
teacher was scored by the same engine, so engine numerics cancel in ``lp_T - lp_old``; for an off-policy
batch it is the trainer's log-prob at the start of the update (the OPD term compares the teacher with the
policy being trained, not with the one that sampled). When a batch is stale (sampled by an
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
from pathlib import Path

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import use_adapter

from openclaw_trl.fsutil import RUN_INFO_FILE
from openclaw_trl.losses import (
    combined_advantages,
    group_relative_advantages,
    masked_mean,
    scheduled_weights,
)
from openclaw_trl.records import TrainingSample
from openclaw_trl.trainer.batches import (
    batch_score_std,
    collate_samples,
    is_off_policy,
    process_share,
    prompt_and_completion,
    truncated_is_weight,
)
from openclaw_trl.trainer.callbacks import AdapterSnapshot, PublishAndConsume, run_info
from openclaw_trl.trainer.distill import (
    captured_hidden_states,
    check_kd_teacher,
    policy_body_and_head,
    teacher_weights,
    topk_distillation,
)
from openclaw_trl.trainer.logps import completion_logps, transformer_body
from openclaw_trl.trainer.reporting import (
    MetricsFile,
    UpdateLines,
    remove_console_callbacks,
    summarize_batch,
)
from openclaw_trl.trainer.versions import InitialCheckpoint, record_version, roll_back

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
        learning=None,
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
        self.learning = learning  # a LearningControl (main process), or None: never paused, no rollback
        self._restored_from: int | None = None  # set while a rollback writes its checkpoint
        self._batch_sample_ids: list[int] = []
        self._batch_turn_ids: list[int] = []
        self._batch_off_policy = False
        self._batch_score_std: float | None = None  # scale_rewards: batch (over the whole batch)
        self._updates_left_in_batch = 0
        self._last_logps: torch.Tensor | None = None
        self._adapter_snapshot = AdapterSnapshot()
        self._loss_inputs: dict | None = None  # the micro-batch inside compute_loss (for the IS weight)
        self._update_started = time.perf_counter()
        self.samples_used = 0
        self.turns_used: set[int] = set()
        self.batch_summary = None  # where the current batch's samples came from (reporting.BatchSummary)
        remove_console_callbacks(self)  # a line per update instead of a progress bar towards max_steps
        self.add_callback(PublishAndConsume(self))
        self.add_callback(InitialCheckpoint(self))
        self.add_callback(UpdateLines(self))
        self.add_callback(MetricsFile(args.output_dir))
        check_kd_teacher(self.args, self.accelerator.unwrap_model(self.model))

    # ------------------------------------------------------------------ batches
    def _take_batch(self) -> list[TrainingSample]:
        """This process's share of the next ``generation_batch_size`` samples (``process_share``).

        ``_batch_sample_ids`` / ``_batch_turn_ids`` keep the whole batch: it is consumed once it is trained.
        """
        started = time.perf_counter()
        samples = self._shared_batch()
        # TRL's step_time includes this wait for people to chat; time/update_s does not.
        self._update_started = time.perf_counter()
        self._log("samples/wait_s", self._update_started - started)
        self._batch_sample_ids = [s.sample_id for s in samples]
        self._batch_turn_ids = [s.turn_id for s in samples]
        # Decided on the whole batch, so every process takes the same branch (the same forwards).
        self._batch_off_policy = is_off_policy(samples, self.temperature)
        self._batch_score_std = batch_score_std(samples)
        self.batch_summary = summarize_batch(samples, with_reward=self.args.w_rl > 0)
        return process_share(samples, self.accelerator.process_index, self.accelerator.num_processes)

    def _shared_batch(self) -> list[TrainingSample]:
        """The next ``generation_batch_size`` samples, the same on every process.

        The main process decides what happens next (``_next_event``): a batch, or a rollback that every
        process then carries out (``trainer.versions.roll_back``) before it waits for the next event.
        """
        from accelerate.utils import broadcast_object_list

        while True:
            holder = [self._next_event() if self.accelerator.is_main_process else None]
            if self.accelerator.num_processes > 1:
                broadcast_object_list(holder)
            kind, value = holder[0]
            if kind == "batch":
                return value
            self._roll_back(value)

    def _next_event(self) -> tuple[str, object]:
        """Main process, between updates: ``("rollback", version)`` for a rollback request, else ``("batch",
        samples)`` once ``generation_batch_size`` samples wait and learning is not paused. ``TimeoutError``
        after ``sample_timeout`` seconds of waiting for samples (paused time not counted)."""
        wanted, waited = self.args.generation_batch_size, 0.0
        poll = self.learning.poll_s if self.learning is not None else None
        dropped = self.store.queue.count_dropped_stale()
        while True:
            if self.learning is not None and (version := self.learning.wait_while_paused()) is not None:
                return "rollback", version
            if self.learning is not None:
                self.learning.trainer_state = "waiting for samples"
            left = None if self.sample_timeout is None else self.sample_timeout - waited
            wait = left if poll is None else (poll if left is None else min(poll, left))
            try:
                samples = self.store.queue.wait_for_samples(
                    wanted,
                    timeout=wait,
                    policy_version=self.state.global_step,
                    max_staleness=self.args.max_staleness,
                )
            except TimeoutError:
                waited += wait
                if left is not None and waited >= self.sample_timeout:
                    raise TimeoutError(
                        f"fewer than {wanted} judged samples arrived within {self.sample_timeout}s; "
                        "they stay queued for the next run"
                    ) from None
                continue
            if self.learning is not None and self.learning.paused:
                # paused while this wait was under way: the batch goes back to the queue, untouched
                self.store.queue.release([s.sample_id for s in samples])
                continue
            self._log("samples/dropped_stale", self.store.queue.count_dropped_stale() - dropped)
            lineage = self.store.lineage.lineage()
            for s in samples:
                s.staleness = lineage.staleness(s.policy_version, self.state.global_step)
            if self.learning is not None:
                self.learning.trainer_state = "updating"
            return "batch", samples

    def _roll_back(self, version: int) -> None:
        """Carry out a rollback on this process; the main process reports the outcome to the requester."""
        try:
            result = roll_back(self, version)
        except Exception as err:
            logger.exception(
                "rollback to version %s failed; training goes on from the current version", version
            )
            if self.learning is not None and self.accelerator.is_main_process:
                self.learning.finish(error=err)
            return
        if self.learning is not None and self.accelerator.is_main_process:
            self.learning.finish(result=result)

    def _generate_and_score_completions(self, inputs):
        samples = self._take_batch()
        updates_per_batch = self.num_iterations * self.args.steps_per_generation
        self._updates_left_in_batch = max(1, updates_per_batch // self.args.gradient_accumulation_steps)

        batch = collate_samples(samples, self.processing_class.pad_token_id, device=self.accelerator.device)
        mask = batch["completion_mask"]
        if self.mask_truncated_completions:  # as TRL: out of the attention and the loss
            mask = mask * (~batch["truncated"]).unsqueeze(1).to(mask.dtype)
        terms = {
            "rl": self._rl_rewards(batch),
            "teacher_logprobs": batch["teacher_logprobs"],
            "opd_mask": batch["opd_mask"],
            "weights": batch["weights"],
        }
        advantages = self._advantages(terms, batch["sampling_logprobs"], mask)
        out = {
            "prompt_ids": batch["prompt_ids"],
            "prompt_mask": batch["prompt_mask"],
            "completion_ids": batch["completion_ids"],
            "completion_mask": mask,
            "num_items_in_batch": self.accelerator.gather(mask.sum()).sum(),  # every process's tokens (TRL)
        }
        if self.off_policy_mask_threshold is not None:  # TRL's off-policy mask compares with the sampler
            out["sampling_per_token_logps"] = batch["sampling_logprobs"]
        if self.beta != 0.0:
            out["ref_per_token_logps"] = self._reference_logps(batch, mask)
        out.update(self._old_logps_and_advantages(batch, mask, advantages, terms))
        if self.args.w_kd > 0:
            out.update(self._kd_inputs(batch, mask))
        self._log_batch_metrics(
            samples, batch, out["advantages"], mask, log_advantages="is_sampling_logprobs" not in out
        )
        return out

    def _rl_rewards(self, batch) -> torch.Tensor:
        """The RL term's rewards: ``r``, or ``r - b`` with the stored session baseline (``session_mean``);
        for Best-of-N group samples their group-relative advantage (``scale_rewards``)."""
        rewards, group = batch["rewards"], batch["is_group"]
        if self.args.advantage_baseline == "session_mean":
            if (~group).any():
                self._log("rl/baseline_mean", batch["baselines"][~group].mean())
            rewards = torch.where(group, rewards, rewards - batch["baselines"])
        if group.any():
            advantages = group_relative_advantages(
                batch["rewards"],
                batch["baselines"],
                batch["group_stds"],
                self.args.scale_rewards,
                self._batch_score_std,
            )
            rewards = torch.where(group, advantages, rewards)
        return rewards

    def _scheduled_weights(self) -> tuple[float, float]:
        """``(w_opd, w_kd)`` at the current optimizer step, as ``opd_kd_schedule`` moves them."""
        start, end = self.args.opd_kd_schedule_steps or (0, 0)
        return scheduled_weights(
            self.args.opd_kd_schedule, self.args.w_opd, self.args.w_kd, self.state.global_step, start, end
        )

    def _advantages(self, terms: dict, old_logprobs, mask) -> torch.Tensor:
        """``weight * (w_rl * r + w_opd * opd_mask * (lp_T - lp_old))`` per token, ``lp_old`` as given: the
        sampling log-probs of an on-policy batch (the engine scored the teacher too, so its numerics cancel),
        the trainer's log-probs at the start of the update for an off-policy one (the student the OPD term
        compares with the teacher is the policy being trained, not the one that sampled)."""
        w_opd, _ = self._scheduled_weights()
        advantages = combined_advantages(
            terms["rl"],
            terms["teacher_logprobs"],
            old_logprobs,
            mask,
            terms["opd_mask"],
            w_rl=self.args.w_rl,
            w_opd=w_opd,
        )
        return advantages * terms["weights"][:, None].to(advantages.dtype)

    def _old_logps_and_advantages(self, batch, mask, advantages, terms) -> dict[str, torch.Tensor]:
        """The PPO ratio's old log-probs and the advantages (IS weight folded in) as the batch needs:

        * on-policy, one pass: neither (the ratio is 1 on the loss forward);
        * off-policy, one optimizer step: ``is_sampling_logprobs`` and the advantage terms (``is_*``), so that
          the advantages (OPD term against the old log-probs) and the IS weight are computed on the loss
          forward itself (its log-probs are the old ones; ``_weight_advantages``);
        * otherwise: ``old_per_token_logps`` from a no-grad forward, the advantages of an off-policy batch
          recomputed against them, and the IS weight applied here.
        """
        one_pass = (
            self.num_iterations == 1
            and self.args.steps_per_generation == self.args.gradient_accumulation_steps
        )
        if self._batch_off_policy and one_pass:
            deferred = {f"is_{name}": value for name, value in terms.items()}
            return {"advantages": advantages, "is_sampling_logprobs": batch["sampling_logprobs"], **deferred}
        if not (self.num_iterations > 1 or self._batch_off_policy):
            return {"advantages": advantages}
        old = self._no_grad_logps(self.model, batch, mask)
        if self._batch_off_policy:
            advantages = self._advantages(terms, old, mask)
        if self.args.vllm_importance_sampling_correction:
            advantages = self._is_weighted(advantages, old, batch["sampling_logprobs"], mask)
        return {"advantages": advantages, "old_per_token_logps": old}

    def _is_weighted(self, advantages, old, sampling, mask) -> torch.Tensor:
        """``advantages * w`` with ``w`` the truncated importance weight ``pi_old / pi_sampling``."""
        weight = truncated_is_weight(
            old,
            sampling,
            mask,
            self.args.vllm_importance_sampling_mode,
            self.args.vllm_importance_sampling_clip_min,
            self.args.vllm_importance_sampling_clip_max,
        )
        self._log("sampling/importance_sampling_ratio/mean", masked_mean(weight.expand_as(mask), mask))
        self._log("sampling/sampling_logp_difference/mean", masked_mean((old - sampling).abs(), mask))
        return advantages * weight

    def _no_grad_logps(self, model, batch, mask) -> torch.Tensor:
        """Per-token log-probs of the batch's completions under ``model`` (no gradient)."""
        input_ids, attention = prompt_and_completion(
            batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], mask
        )
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention,
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
        judged = batch["rewards"][~batch["is_group"]]  # NaN means when the batch is all Best-of-N groups
        self._log("reward", judged.mean())
        self._log("rl/reward_mean", judged.mean())
        self._log("rl/nonzero_reward_rate", (judged != 0).float().mean())
        self._log_best_of_n(samples)
        self._log("opd/hint_accept_rate", opd.float().mean())
        monitored = [s.meta["prm_eval_score"] for s in samples if s.meta.get("prm_eval_score") is not None]
        if monitored:  # prm_monitor: the PRM reward of OPD samples, not trained on
            self._log("rollout/prm_eval_score", sum(monitored) / len(monitored))
        if opd.any():
            opd_rows = opd_adv[opd]
            self._log("opd/mean_advantage", masked_mean(opd_rows, mask[opd]))
            self._log("opd/mean_abs_advantage", masked_mean(opd_rows.abs(), mask[opd]))
        if log_advantages:  # else logged per micro-batch once the IS weight is known (_weight_advantages)
            self._log("advantages/mean", masked_mean(advantages, mask))
        lengths = batch["completion_mask"].sum(1).float()
        self._log("completions/mean_length", lengths.mean())
        self._log("completions/clipped_ratio", batch["truncated"].float().mean())
        self._log("samples/staleness", sum(s.staleness or 0 for s in samples) / len(samples))
        if self.store is not None:  # the main process's
            self._log("samples/waiting", self.store.queue.count_waiting())
            self._log(
                "opd/teacher_failed", self.store.judging.count_teacher_failed()
            )  # turns so far without teacher

    def _log_best_of_n(self, samples) -> None:
        """``best_of_n/score_mean`` (quick scores of the batch's group samples), ``best_of_n/served_score``
        (of the served candidates among them), ``best_of_n/reward_std`` (mean std of their groups)."""
        group = [s for s in samples if s.group_id is not None]
        if not group:
            return
        scores = [s.meta["best_of_n"]["score"] for s in group if s.meta["best_of_n"]["score"] is not None]
        served = [s.reward for s in group if s.meta["best_of_n"]["served"]]
        self._log("best_of_n/samples", len(group))
        if scores:
            self._log("best_of_n/score_mean", sum(scores) / len(scores))
        if served:
            self._log("best_of_n/served_score", sum(served) / len(served))
        self._log("best_of_n/reward_std", sum(s.group_std or 0.0 for s in group) / len(group))

    # ------------------------------------------------------------------- loss
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = self._completion_logps(*args, **kwargs)
        self._last_logps = logps.detach()
        inputs = self._loss_inputs
        if inputs is not None and "is_sampling_logprobs" in inputs and torch.is_grad_enabled():
            self._weight_advantages(inputs, self._last_logps)  # before _compute_loss reads the advantages
        return logps, entropies, aux

    def _completion_logps(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """TRL's per-token log-probs, with the LM head on the completion positions only (``trainer.logps``);
        TRL's own path for multimodal inputs."""
        body = transformer_body(self.accelerator.unwrap_model(model))
        if body is None or any(value is not None for value in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        return completion_logps(
            model,
            body,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size,
            compute_entropy,
            compute_aux_loss,
            self.accelerator.autocast,
        )

    def _weight_advantages(self, inputs, old: torch.Tensor) -> None:
        """This micro-batch's advantages against the old log-probs ``old`` (``_advantages``), times the
        truncated IS weight ``pi_old / pi_sampling`` when the correction is on (once per micro-batch)."""
        sampling = inputs.pop("is_sampling_logprobs")
        terms = {name: inputs.pop(f"is_{name}") for name in ("rl", "teacher_logprobs", "opd_mask", "weights")}
        mask = inputs["completion_mask"]
        advantages = self._advantages(terms, old, mask)
        if self.args.vllm_importance_sampling_correction:
            advantages = self._is_weighted(advantages, old, sampling, mask)
        inputs["advantages"] = advantages
        self._log("advantages/mean", masked_mean(inputs["advantages"], mask))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss (PPO clip, KL, IS-weighted advantages) plus ``w_kd`` (as scheduled) times the top-K KD term."""
        w_opd, w_kd = self._scheduled_weights()
        if self.args.opd_kd_schedule != "constant":
            self._log("opd/weight", w_opd)
            self._log("kd/weight", w_kd)
        use_kd = w_kd > 0 and bool(inputs["kd_mask"].any())
        parts = policy_body_and_head(self.accelerator.unwrap_model(model)) if use_kd else None
        # With top-K KD on, keep the hidden states of the loss forward: the KD term reuses them (no 2nd pass).
        self._loss_inputs = inputs
        try:
            with captured_hidden_states(parts[0] if parts else None) as hidden:
                loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._loss_inputs = None
        self._log_kl_old(inputs)
        if use_kd:
            kd = topk_distillation(
                model,
                inputs,
                source=self.args.kd_topk_source,
                k=self.args.kd_topk,
                temperature=self.temperature,
                cap=self.args.kd_cap,
                teacher=teacher_weights(self.accelerator.unwrap_model(model), self.args.teacher),
                parts=parts,
                hidden=hidden,
            )
            self._log("kd/loss", kd.detach())
            kd_term = w_kd * kd / self.current_gradient_accumulation_steps
            self._log("kd/loss_share", _share(kd_term.detach(), loss.detach()))
            loss = loss + kd_term
        return loss

    def _log_kl_old(self, inputs) -> None:
        """KL(old || new) of the loss forward, k3 estimator; exactly 0 on the first pass of an on-policy batch."""
        if inputs.get("old_per_token_logps") is not None and self._last_logps is not None:
            delta = self._last_logps - inputs["old_per_token_logps"]
            self._log("kl_old", masked_mean(torch.exp(delta) - delta - 1, inputs["completion_mask"]))
        else:
            self._log("kl_old", 0.0)

    # -------------------------------------------------------- publish / resume
    def publish(self, parent: int | None = None, updates: int = 1, note: str = "update") -> None:
        """Record the current adapter as version = global step in the store's lineage (its weights came from
        ``parent`` by ``updates`` optimizer updates; an update's parent is the step before), then hand it to
        the serving engine (atomic swap there). Main process."""
        if not self.accelerator.is_main_process:
            return
        version = self.state.global_step
        if note == "update":
            parent = version - 1
        if self.store is not None:
            self.store.lineage.record_published(version, parent, updates, note)
        if self.engine is None:
            return
        state = self._adapter_snapshot(self.accelerator.unwrap_model(self.model))
        started = time.perf_counter()
        self.engine.publish_adapter(state, version=version)
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
            requeued = self.store.queue.requeue_after(step)
            if requeued:
                logger.info(
                    "training from step %s: %s samples consumed after it are queued again", step, requeued
                )
        if self.learning is None:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        with self.learning.trainer_running():
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
        """``openclaw_run.json`` (``callbacks.run_info``): what ``openclaw-trl push`` puts in the model card."""
        output_dir = Path(output_dir or self.args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        path = output_dir / RUN_INFO_FILE
        path.write_text(json.dumps(run_info(self), indent=2, default=str))
        return path

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        record_version(self, restored_from=self._restored_from)
        if self.accelerator.is_main_process:
            self.write_run_info()


def _share(kd_term: torch.Tensor, ppo_loss: torch.Tensor) -> torch.Tensor:
    """``|kd| / (|ppo| + |kd|)``: the KD term's share of the loss value (0 when both are 0)."""
    return kd_term.abs() / (ppo_loss.abs() + kd_term.abs()).clamp(min=1e-12)


def judged_reward(prompts=None, completions=None, **kwargs):
    """Rewards come from the judges through the store, not from reward functions.

    ``GRPOTrainer`` requires a reward source at construction; this one is never called because
    ``OpenClawTrainer`` builds its batches (and advantages) itself.
    """
    raise RuntimeError("OpenClawTrainer reads judged rewards from the store; judged_reward is never called")
