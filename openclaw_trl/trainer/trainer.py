"""``OpenClawTrainer``: TRL's ``GRPOTrainer`` fed with judged live turns instead of generated rollouts.

What it overrides, and nothing else:

* where a batch comes from: ``_generate_and_score_completions`` takes the next ``batch_size`` judged
  samples from the store (``trainer.intake``: blocking until they exist; surplus samples stay queued; with
  ``max_staleness`` the too-stale ones are dropped, kept in the store with the reason) and builds the
  prompt/completion tensors from the stored token ids;
* how advantages are built (``trainer.advantages``): per token, ``A = w_rl * r + w_opd * opd_mask * (lp_T -
  lp_old)``, ``r`` group-relative for Best-of-N group samples, times each sample's ``weight``; TRL's loss
  then applies the PPO clip (``epsilon`` / ``epsilon_high``) and aggregates as ``loss_type`` says, adds its
  KL term when ``beta > 0`` (the reference log-probs come from the policy with its adapter disabled, as TRL
  does with PEFT) and sees a zero mask on truncated completions when ``mask_truncated_completions`` is on;
* how the per-token log-probs are computed: TRL's fused LM head, run on the completion positions only
  (``trainer.logps``: a 20k-token agent prompt costs no LM head work), in a loss forward run before TRL's
  loss (``trainer.loss``);
* what the loss adds: with ``w_kd > 0`` the top-K distillation term (``trainer.distill``), computed on the
  hidden states of the loss forward;
* what happens after an optimizer step (``trainer.callbacks``): the adapter is published to the serving
  engine (policy version + 1) and, once a batch's last step is done (``trainer.ledger``), its samples are
  marked consumed with the step;
* what the console shows: one line per update, every logged metrics dict appended to
  ``<output_dir>/metrics.jsonl`` (``trainer.reporting``, the numbers of ``trainer.metrics``);
* what happens between updates (``learning``, a ``trainer.control.LearningControl``): while learning is
  paused no batch is taken; a rollback request is carried out by ``rollback_to`` (``trainer.versions``);
  each checkpoint is recorded as an adapter version;
* what an update that runs out of memory does (``trainer.out_of_memory``): retried once, then skipped
  (no optimizer step, the weights unchanged) with its reason; training goes on with the next batch;
* what is served: with ``guard`` on, each new version is checked before it is published (``trainer.guard``,
  ``trainer.safety``); one that fails is held back and the trainer rewinds to the last one that passed.

``lp_old`` in the OPD term is the engine's sampling log-prob for an on-policy batch (the engine scored the
teacher too, so its numerics cancel in ``lp_T - lp_old``) and the trainer's log-prob at the start of the
update for an off-policy one. When a batch is stale (sampled by an older adapter), sampled at another
temperature, or reused for several passes (``num_iterations``), the PPO ratio's old log-probs are those of
the weights at the start of the update and a truncated importance weight ``min(pi_old / pi_sampling, C)`` is
folded into the advantage (TRL's correction for vLLM). On-policy single-pass batches need no old log-probs
(ratio = 1); stale single-pass batches take them from the loss forward itself (one optimizer step per batch),
their advantages completed there before TRL's loss reads them; other batches get them from a no-grad
forward when the batch is taken.

State: the trainer owns all of it, on the training loop's thread. The batch bookkeeping is its ``ledger``
(``trainer.ledger``), handed to the callback that closes batches; publishing, rollback (``rollback_to``)
and resume (``resume_from``) are its methods (``trainer.versions``).
"""

from __future__ import annotations

import logging
import threading
import time

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import use_adapter

from openclaw_trl.losses import masked_mean, scheduled_weights
from openclaw_trl.records import TrainingSample
from openclaw_trl.trainer.advantages import AdvantageTerms, Deferred, is_weighted, rl_rewards
from openclaw_trl.trainer.batches import (
    batch_score_std,
    collate_samples,
    is_off_policy,
    process_share,
    prompt_and_completion,
)
from openclaw_trl.trainer.callbacks import AdapterSnapshot, PublishAndConsume
from openclaw_trl.trainer.distill import (
    captured_hidden_states,
    check_kd_teacher,
    kd_inputs,
    policy_body_and_head,
    teacher_weights,
    topk_distillation,
)
from openclaw_trl.trainer.intake import StopTraining, judged_reward, next_event  # noqa: F401 - StopTraining also read from here
from openclaw_trl.trainer.ledger import BatchLedger
from openclaw_trl.trainer.logps import completion_logps, transformer_body
from openclaw_trl.trainer.loss import LossForward, forward_arguments, kd_share, kl_old
from openclaw_trl.trainer.metrics import batch_metrics
from openclaw_trl.trainer.out_of_memory import OutOfMemorySteps
from openclaw_trl.trainer.reporting import MetricsFile, UpdateLines, remove_console_callbacks, summarize_batch
from openclaw_trl.trainer.safety import TrainerSafety, make_guard
from openclaw_trl.trainer.versions import InitialCheckpoint, TrainerVersions

logger = logging.getLogger(__name__)


class OpenClawTrainer(OutOfMemorySteps, TrainerSafety, TrainerVersions, GRPOTrainer):
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
        update_turns=None,
        user_name: str | None = None,
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
        self.ledger = BatchLedger()
        self.update_turns = update_turns  # sharing.UpdateTurns: several users' trainers take turns
        self.user_name = user_name  # whose adapter this trainer trains (None: the run's only one)
        self._stop = threading.Event()  # set by ``request_stop`` from another thread
        self._next_batch: list[TrainingSample] | None = None  # taken before the step that trains on it
        self.batch_summary = None  # where the current batch's samples came from (reporting.BatchSummary)
        self._adapter_snapshot = AdapterSnapshot()
        self._loss_forward: LossForward | None = None  # compute_loss's forward, for TRL's loss to use
        remove_console_callbacks(self)  # a line per update instead of a progress bar towards max_steps
        self.add_callback(PublishAndConsume(self, self.ledger))
        self.add_callback(InitialCheckpoint(self))
        self.add_callback(UpdateLines(self))
        self.add_callback(MetricsFile(args.output_dir))
        check_kd_teacher(self.args, self.accelerator.unwrap_model(self.model))
        self.guard = make_guard(self, args) if args.guard else None

    def request_stop(self) -> None:
        """Ask this trainer, from any thread, to take no new batch: it raises ``StopTraining`` before its next
        update (the current one finishes, is published and checkpointed)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def samples_used(self) -> int:
        """Samples of the batches this process has finished training (this run)."""
        return self.ledger.samples_used

    @property
    def turns_used(self) -> set[int]:
        return self.ledger.turns_used

    def log_metric(self, name: str, value) -> None:
        """Add ``value`` to metric ``name``: averaged over the update and logged with it."""
        self._metrics["train"][name].append(float(value))

    # ------------------------------------------------------------------ batches
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """Before each optimizer step (the training loop's first call of a step): take the batch it trains
        on when it needs a new one (TRL regenerates every ``steps_per_generation * num_iterations``
        micro-steps), then, with several users, wait for this user's turn (``sharing.UpdateTurns``). The wait
        for samples thus happens between steps, never while holding the turn."""
        self.end_turn()  # the previous update's step, log and checkpoint are done
        self.start_update()
        if self.stop_requested:
            raise StopTraining(f"training of {self.user_name or 'the adapter'} stopped")
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._next_batch is None and (self._step % generate_every == 0 or self._buffered_inputs is None):
            self._next_batch = self._take_batch()
        if self.update_turns is not None:
            waited = self.update_turns.take(self.user_name)
            self.log_metric("schedule/turn_wait_s", waited)
            self.ledger.restart_clock()
        return super().get_batch_samples(epoch_iterator, num_batches, device)

    def end_turn(self) -> None:
        """The update is done (stepped, published, logged and checkpointed): another user's may run."""
        if self.update_turns is not None:
            self.update_turns.give_back(self.user_name)

    def _take_batch(self) -> list[TrainingSample]:
        """This process's share of the next ``generation_batch_size`` samples (``process_share``); the whole
        batch goes into the ledger, which closes it after ``num_iterations * steps_per_generation /
        gradient_accumulation_steps`` optimizer steps (at least one)."""
        started = time.perf_counter()
        samples = self._shared_batch()
        updates = (
            self.num_iterations * self.args.steps_per_generation // self.args.gradient_accumulation_steps
        )
        # Decided on the whole batch, so every process takes the same branch (the same forwards).
        self.ledger.open(samples, updates, is_off_policy(samples, self.temperature), batch_score_std(samples))
        # TRL's step_time includes this wait for people to chat; time/update_s does not.
        self.log_metric("samples/wait_s", self.ledger.update_started - started)
        self.batch_summary = summarize_batch(samples, with_reward=self.args.w_rl > 0)
        return process_share(samples, self.accelerator.process_index, self.accelerator.num_processes)

    def _shared_batch(self) -> list[TrainingSample]:
        """The next ``generation_batch_size`` samples, the same on every process.

        The main process decides what happens next (``intake.next_event``): a batch, or a rollback that every
        process then carries out before it waits for the next event.
        """
        from accelerate.utils import broadcast_object_list

        while True:
            holder = [self._next_event() if self.accelerator.is_main_process else None]
            if self.accelerator.num_processes > 1:
                broadcast_object_list(holder)
            event = holder[0]
            if event.samples is not None:
                return event.samples
            self._carry_out_rollback(event.rollback)

    def _next_event(self):
        event = next_event(
            self.store,
            self.learning,
            self.args.generation_batch_size,
            self.state.global_step,
            self.args.max_staleness,
            self.sample_timeout,
            self.temperature,
            self.args.max_samples_waiting,
        )
        if event.samples is not None:
            self.log_metric("samples/dropped_stale", event.dropped_stale)
            self.log_metric("samples/dropped_temperature", event.dropped_temperature)
            self.log_metric("samples/dropped_backlog", event.dropped_backlog)
        return event

    def _carry_out_rollback(self, version: int) -> None:
        """A rollback request on this process; the main process reports the outcome to the requester."""
        report = self.learning is not None and self.accelerator.is_main_process
        try:
            result = self.rollback_to(version)
        except Exception as err:
            logger.exception(
                "rollback to version %s failed; training goes on from the current version", version
            )
            if report:
                self.learning.finish(error=err)
            return
        if report:
            self.learning.finish(result=result)

    def _generate_and_score_completions(self, inputs):
        if self._next_batch is None:
            self._next_batch = self._take_batch()
        samples = self._next_batch  # kept until the batch is built: a retry (out of memory) builds it again
        batch = collate_samples(samples, self.processing_class.pad_token_id, device=self.accelerator.device)
        mask = batch["completion_mask"]
        if self.mask_truncated_completions:  # as TRL: out of the attention and the loss
            mask = mask * (~batch["truncated"]).unsqueeze(1).to(mask.dtype)
        args = self.args
        rewards, baseline_mean = rl_rewards(
            batch, args.advantage_baseline, args.scale_rewards, self.ledger.score_std, args.group_std_floor
        )
        if baseline_mean is not None:
            self.log_metric("rl/baseline_mean", baseline_mean)
        terms = AdvantageTerms(rewards, batch["teacher_logprobs"], batch["opd_mask"], batch["weights"])
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
            out.update(kd_inputs(batch, mask, self.args.kd_topk_source))
        for name, value in batch_metrics(
            samples, batch, out["advantages"], mask, log_advantages=not Deferred.in_inputs(out)
        ).items():
            self.log_metric(name, value)
        if self.store is not None:  # the main process's
            self.log_metric("samples/waiting", self.store.queue.count_waiting())
            self.log_metric(
                "opd/teacher_failed", self.store.judging.count_teacher_failed()
            )  # turns without teacher
        self._next_batch = None
        return out

    def _scheduled_weights(self) -> tuple[float, float]:
        """``(w_opd, w_kd)`` at the current optimizer step, as ``opd_kd_schedule`` moves them."""
        start, end = self.args.opd_kd_schedule_steps or (0, 0)
        return scheduled_weights(
            self.args.opd_kd_schedule, self.args.w_opd, self.args.w_kd, self.state.global_step, start, end
        )

    def _advantages(self, terms: AdvantageTerms, old_logprobs, mask) -> torch.Tensor:
        """The per-token advantages against ``old_logprobs`` (``trainer.advantages``), ``w_opd`` as scheduled."""
        return terms.advantages(old_logprobs, mask, self.args.w_rl, self._scheduled_weights()[0])

    def _old_logps_and_advantages(self, batch, mask, advantages, terms) -> dict[str, torch.Tensor]:
        """The PPO ratio's old log-probs and the advantages (IS weight folded in) as the batch needs:

        * on-policy, one pass: neither (the ratio is 1 on the loss forward);
        * off-policy, one optimizer step: the advantages are ``Deferred`` to the loss forward (its log-probs
          are the old ones), where ``compute_loss`` completes them;
        * otherwise: ``old_per_token_logps`` from a no-grad forward, the advantages of an off-policy batch
          recomputed against them, and the IS weight applied here.
        """
        one_pass = (
            self.num_iterations == 1
            and self.args.steps_per_generation == self.args.gradient_accumulation_steps
        )
        off_policy = self.ledger.off_policy
        if off_policy and one_pass:
            return {"advantages": advantages, **Deferred(terms, batch["sampling_logprobs"]).as_inputs()}
        if not (self.num_iterations > 1 or off_policy):
            return {"advantages": advantages}
        old = self._no_grad_logps(self.model, batch, mask)
        if off_policy:
            advantages = self._advantages(terms, old, mask)
        if self.args.vllm_importance_sampling_correction:
            advantages = self._is_weighted(advantages, old, batch["sampling_logprobs"], mask)
        return {"advantages": advantages, "old_per_token_logps": old}

    def _is_weighted(self, advantages, old, sampling, mask) -> torch.Tensor:
        advantages, metrics = is_weighted(advantages, old, sampling, mask, self.args)
        for name, value in metrics.items():
            self.log_metric(name, value)
        return advantages

    def _no_grad_logps(self, model, batch, mask) -> torch.Tensor:
        """Per-token log-probs of the batch's completions under ``model`` (no gradient)."""
        input_ids, attention = prompt_and_completion(
            batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], mask
        )
        with torch.no_grad():
            logps, _, _ = self._completion_logps(
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

    # ------------------------------------------------------------------- loss
    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        """TRL's loss forward is the one ``compute_loss`` ran already; any other forward runs here."""
        if self._loss_forward is not None:
            forward, self._loss_forward = self._loss_forward, None
            return forward.as_tuple()
        return self._completion_logps(model, *args, **kwargs)

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
        passed = (input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss)
        if body is None or any(value is not None for value in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(model, *passed, **multimodal)
        return completion_logps(model, body, *passed, self.accelerator.autocast)

    def _complete_inputs(self, inputs: dict, logps: torch.Tensor) -> None:
        """Complete deferred advantages in ``inputs`` (TRL's micro-batch, in place, before its loss reads it)
        against the loss forward's log-probs ``logps`` (the old ones of a one-step batch), times the truncated
        IS weight when the correction is on."""
        deferred = Deferred.pop(inputs)
        if deferred is None:
            return
        mask = inputs["completion_mask"]
        advantages = self._advantages(deferred.terms, logps, mask)
        if self.args.vllm_importance_sampling_correction:
            advantages = self._is_weighted(advantages, logps, deferred.sampling_logprobs, mask)
        inputs["advantages"] = advantages
        self.log_metric("advantages/mean", masked_mean(advantages, mask))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss (PPO clip, KL, IS-weighted advantages) on the loss forward run here (``trainer.loss``),
        plus ``w_kd`` (as scheduled) times the top-K KD term on that forward's hidden states."""
        w_opd, w_kd = self._scheduled_weights()
        if self.args.opd_kd_schedule != "constant":
            self.log_metric("opd/weight", w_opd)
            self.log_metric("kd/weight", w_kd)
        use_kd = w_kd > 0 and bool(inputs["kd_mask"].any())
        parts = policy_body_and_head(self.accelerator.unwrap_model(model)) if use_kd else None
        with captured_hidden_states(parts[0] if parts else None) as hidden:
            forward = LossForward(
                *self._completion_logps(
                    model,
                    *forward_arguments(inputs),
                    compute_entropy=True,
                    compute_aux_loss=self.aux_loss_enabled,
                )
            )
        logps = forward.logps.detach()
        self._complete_inputs(inputs, logps)
        self._loss_forward = forward
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._loss_forward = None
        self.log_metric("kl_old", kl_old(logps, inputs.get("old_per_token_logps"), inputs["completion_mask"]))
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
            self.log_metric("kd/loss", kd.detach())
            kd_term = w_kd * kd / self.current_gradient_accumulation_steps
            self.log_metric("kd/loss_share", kd_share(kd_term.detach(), loss.detach()))
            loss = loss + kd_term
        return loss
