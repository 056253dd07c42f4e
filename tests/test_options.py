"""Every option that is accepted works, or is refused with an error that says what to use instead.

The behaviour tests train the tiny model on stored samples (the helpers of ``test_trainer``): the KL to the base
model (``beta``), ``mask_truncated_completions``, top-K distillation on the student's support and the OPD clip
range. The last tests list the TRL fields of the code paths this trainer replaces, read from the installed TRL
source, and check that each is honoured or refused.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sqlite3

import pytest
import torch
from transformers import AutoModelForCausalLM

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.losses import topk_distillation_loss
from openclaw_trl.store import Store
from tests.helpers import clipped_surrogate, token_mean
from tests.trainer_helpers import direct_grads, lora_params, make_trainer, sampled, train_and_capture


def _completion_logps(model, prompts, completions):
    """Per-token log-probs and logits of ``completions`` after ``prompts`` (one row at a time, no padding)."""
    logps, logits = [], []
    for p, c in zip(prompts, completions):
        with torch.no_grad():
            out = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1]
        logits.append(out)
        logps.append(torch.log_softmax(out, -1).gather(-1, torch.tensor(c)[:, None])[:, 0])
    return logps, logits


# ---------------------------------------------------------------------------------------------- beta
def test_beta_kl_is_zero_on_the_first_pass_and_logged(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    for s in sampled(tiny_model_dir, 4):
        store.queue.add_sample(s)
    trainer = make_trainer(
        tiny_model_dir,
        tmp_path,
        store,
        method="rl",
        beta=0.04,
        num_iterations=2,
        max_steps=2,
        learning_rate=3e-2,
    )
    trainer.train()
    kl = [h["kl"] for h in trainer.state.log_history if "kl" in h]
    assert len(kl) == 2
    assert kl[0] == 0.0  # the zero-initialised adapter is the base model
    assert kl[1] > 0.0  # after one step the policy has moved away from it


def test_beta_gradient_equals_direct_ppo_plus_kl_to_base(tiny_model_dir, tmp_path):
    """With a non-zero adapter the KL to the base model (adapter disabled) adds ``beta * grad k3``."""
    samples = sampled(tiny_model_dir, 4, rewards=[1.0, -1.0, -1.0, 1.0])
    store = Store(tmp_path / "store.sqlite")
    for s in samples:
        store.queue.add_sample(s)
    trainer = make_trainer(tiny_model_dir, tmp_path, store, method="rl", beta=0.5)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # move the policy away from the base model
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    init = lora_params(trainer.model, True)
    from tests.trainer_helpers import GradCapture

    capture = GradCapture(trainer.model)
    trainer.add_callback(capture)
    trainer.train()
    assert trainer.state.log_history[0]["kl"] > 0

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ref_rows, _ = _completion_logps(
        base, [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
    )

    def loss_fn(logp, logits, batch, mask):
        ref = torch.zeros_like(logp)
        for i, row in enumerate(ref_rows):
            ref[i, : len(row)] = row
        ratio = torch.exp(logp - logp.detach())
        kl = (torch.exp(ref - logp) - (ref - logp) - 1) * ratio  # TRL's use_bias_correction_kl
        per_token = clipped_surrogate(logp, batch["rewards"][:, None]) + 0.5 * kl
        return token_mean(per_token, mask)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    got = capture.grads[0]
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------ mask_truncated_completions
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "kept"])
def test_truncated_completions_leave_the_loss(tiny_model_dir, tmp_path, masked):
    samples = sampled(tiny_model_dir, 4, rewards=[1.0, -1.0, -1.0, 1.0])
    for s, reason in zip(samples, ["length", "stop", "length", None]):
        s.finish_reason = reason
    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, samples, method="rl", mask_truncated_completions=masked
    )
    assert trainer.state.log_history[0]["completions/clipped_ratio"] == 0.5
    keep = torch.tensor([0.0, 1.0, 0.0, 1.0]) if masked else torch.ones(4)

    def loss_fn(logp, logits, batch, mask):
        return token_mean(clipped_surrogate(logp, batch["rewards"][:, None]), mask * keep[:, None])

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


def test_existing_store_gains_the_new_sample_columns(tmp_path):
    """A store written before ``finish_reason``/``teacher_prompt_ids`` were columns: the scorer's finish reason
    (kept in the sample's meta) is recovered."""
    path = tmp_path / "old.sqlite"
    with Store(path) as store:
        sample = _sampled_stub(meta={"finish_reason": "length"})
        store.queue.add_sample(sample)
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE samples DROP COLUMN finish_reason")
    conn.execute("ALTER TABLE samples DROP COLUMN teacher_prompt_ids")
    conn.commit()
    conn.close()
    with Store(path) as store:
        (back,) = store.queue.take_samples(1)
    assert back.finish_reason == "length" and back.teacher_prompt_ids is None


def _sampled_stub(**kw):
    from openclaw_trl.records import TrainingSample

    return TrainingSample(
        turn_id=1,
        prompt_ids=[1, 2],
        completion_ids=[3],
        sampling_logprobs=[-1.0],
        temperature=1.0,
        policy_version=0,
        **kw,
    )


# --------------------------------------------------------------------------- kd_topk_source: student
@pytest.mark.parametrize("chunked", [False, True], ids=["one-block", "chunked"])
def test_student_topk_distillation_gradient(tiny_model_dir, tmp_path, monkeypatch, chunked):
    """OPD with a zero advantage: the gradient is the KD term's, on the student's top-K ids with the base
    teacher's log-probs under the hint-augmented prompt (an independent forward of the base model)."""
    if chunked:
        import openclaw_trl.trainer.distill as distill_module

        monkeypatch.setattr(distill_module, "KD_LOGITS_ELEMS", 3 * 2048)  # 3 positions per chunk
    samples = sampled(tiny_model_dir, 4, hint=True, rewards=[0.0] * 4)
    for i, s in enumerate(samples):  # the hint: a few more prompt tokens (one sample without a stored prompt)
        s.teacher_prompt_ids = s.prompt_ids + [40 + i, 77, 301, 12] if i != 2 else None
    trainer, init, got = train_and_capture(
        tiny_model_dir, tmp_path, samples, method="opd", w_kd=0.5, kd_topk=3, kd_topk_source="student"
    )
    assert trainer.state.log_history[0]["kd/loss"] > 0

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with_prompt = [s for s in samples if s.teacher_prompt_ids]
    _, teacher_logits = _completion_logps(
        base, [s.teacher_prompt_ids for s in with_prompt], [s.completion_ids for s in with_prompt]
    )
    rows = [i for i, s in enumerate(samples) if s.teacher_prompt_ids]

    def loss_fn(logp, logits, batch, mask):
        student_all = torch.log_softmax(logits, -1)
        total = 0.0
        for row, t_logits in zip(rows, teacher_logits):
            n = len(samples[row].completion_ids)
            student, ids = student_all[row, :n].topk(3, dim=-1)
            teacher = torch.log_softmax(t_logits, -1).gather(-1, ids)
            kd = topk_distillation_loss(student[None], teacher[None], torch.ones(1, n), cap=10.0)
            total = total + kd.sum() / n
        return 0.5 * total / len(samples)

    want = direct_grads(tiny_model_dir, init, samples, loss_fn)
    assert sum(g.abs().sum() for g in want.values()) > 0
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=1e-5, rtol=1e-4)


def test_student_source_with_base_teacher_needs_an_adapter(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from openclaw_trl.trainer import OpenClawTrainer

    config = OpenClawConfig(
        output_dir=str(tmp_path / "run"),
        report_to="none",
        method="opd",
        w_kd=0.1,
        kd_topk_source="student",
        batch_size=2,
        store_path=str(tmp_path / "store.sqlite"),
    )
    with pytest.raises(ValueError, match="use_peft: true, or use teacher: policy"):
        OpenClawTrainer(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
            args=config,
            store=Store(tmp_path / "store.sqlite"),
            processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        )


def test_student_source_asks_the_engine_for_no_topk():
    common = dict(output_dir="/tmp/unused", report_to="none", method="opd", w_kd=0.1)
    assert OpenClawConfig(**common).judge_config().kd_topk == 20
    assert OpenClawConfig(**common, kd_topk_source="student").judge_config().kd_topk == 0


# -------------------------------------------------------------------------------------- OPD clip range
@pytest.mark.parametrize(
    "method, overrides, high",
    [
        ("opd", {}, 0.2),
        ("opd", {"epsilon": 0.1}, 0.1),
        ("opd", {"epsilon_high": 0.28}, 0.28),
        ("combine", {}, 0.28),
        ("rl", {"epsilon_high": 0.3}, 0.3),
    ],
)
def test_opd_clip_is_symmetric_unless_the_recipe_sets_it(method, overrides, high):
    config = OpenClawConfig(output_dir="/tmp/unused", report_to="none", method=method, **overrides)
    assert config.epsilon_high == high


# ------------------------------------------------------------------------- TRL fields: honoured or refused
# What the replaced TRL code paths read: rollout generation, rewards and groups, the dataset, completion logging.
# Each is refused (here: a value that must be rejected) ...
REFUSED = {
    "disable_tqdm": (False, "metrics.jsonl"),
    "use_vllm": (True, "engine: vllm"),
    "vllm_mode": ("server", "no separate vLLM server"),
    "vllm_server_base_url": ("http://127.0.0.1:8000", "no separate vLLM server"),
    "vllm_server_host": ("127.0.0.1", "no separate vLLM server"),
    "vllm_server_port": (9000, "no separate vLLM server"),
    "vllm_group_port": (5000, "no separate vLLM server"),
    "vllm_tensor_parallel_size": (2, "one device"),
    "vllm_model_impl": ("transformers", "vLLM's own model"),
    "vllm_structured_outputs_regex": ("a+", "serving engine samples"),
    "use_transformers_continuous_batching": (True, "engine: hf"),
    "use_transformers_paged": (True, "engine: hf"),
    "transformers_continuous_batching_config": ({"max_batch_tokens": 8}, "engine_max_batch_size"),
    "cache_implementation": ("static", "TRL does not generate"),
    "ds3_gather_for_generation": (False, "TRL does not generate"),
    "generation_kwargs": ({"top_p": 0.9}, "each chat request"),
    "top_p": (0.9, "each chat request"),
    "top_k": (5, "each chat request"),
    "min_p": (0.1, "each chat request"),
    "repetition_penalty": (1.1, "each chat request"),
    "chat_template_kwargs": ({"enable_thinking": False}, "chat template"),
    "max_tool_calling_iterations": (3, "tools run in the client"),
    "pad_to_multiple_of": (64, "longest sample"),
    "generation_batch_size": (64, "set batch_size"),
    "steps_per_generation": (2, "set batch_size"),
    "gradient_accumulation_steps": (4, "set batch_size"),
    "auto_find_batch_size": (True, "set batch_size"),
    "num_generations": (4, "one completion"),
    "num_generations_eval": (2, "openclaw-trl eval"),
    "eval_strategy": ("steps", "openclaw-trl eval"),
    "per_device_eval_batch_size": (2, "openclaw-trl eval"),
    "reward_weights": ([1.0], "w_rl and w_opd"),
    "multi_objective_aggregation": ("normalize_then_sum", "nothing to aggregate"),
    "shuffle_dataset": (True, "oldest first"),
    "sync_ref_model": (True, "adapter disabled"),
    "ref_model_mixup_alpha": (0.5, "sync_ref_model"),
    "ref_model_sync_steps": (8, "sync_ref_model"),
    "log_completions": (True, "openclaw-trl export"),
    "log_completions_hub_repo": ("me/completions", "openclaw-trl export"),
    "num_completions_to_print": (2, "openclaw-trl export"),
    "log_unique_prompts": (True, "openclaw-trl export"),
    "log_multimodal": (False, "text only"),
    "vllm_importance_sampling_cap": (2.0, "vllm_importance_sampling_clip_max"),
}
# ... or honoured, and by what.
HONOURED = {
    "beta": "KL to the base model (test_beta_*)",
    "scale_rewards": "Best-of-N group advantages; refused without best_of_n > 1 (test_best_of_n)",
    "mask_truncated_completions": "from the stored finish_reason (test_truncated_completions_leave_the_loss)",
    "temperature": "serving temperature = training temperature (test_trainer, test_chat)",
    "max_completion_length": "the serving token limit (runtime)",
    "num_iterations": "passes per batch (test_trainer.test_several_iterations_clip)",
    "per_device_train_batch_size": "the micro-batch of an update (derive_batch_geometry)",
    "epsilon": "TRL's PPO clip",
    "epsilon_high": "TRL's PPO clip (method default, test_opd_clip_*)",
    "delta": "TRL's two-sided clip",
    "loss_type": "TRL's loss aggregation",
    "importance_sampling_level": "TRL's loss",
    "top_entropy_quantile": "TRL's loss (entropy mask)",
    "entropy_coef": "TRL's loss",
    "use_adaptive_entropy": "TRL's loss",
    "entropy_coef_min": "TRL's loss",
    "entropy_coef_max": "TRL's loss",
    "entropy_coef_delta": "TRL's loss",
    "entropy_target": "TRL's loss",
    "sapo_temperature_neg": "TRL's loss",
    "sapo_temperature_pos": "TRL's loss",
    "vespo_k_pos": "TRL's loss",
    "vespo_lambda_pos": "TRL's loss",
    "vespo_k_neg": "TRL's loss",
    "vespo_lambda_neg": "TRL's loss",
    "use_bias_correction_kl": "TRL's loss (test_beta_gradient_*)",
    "router_aux_loss_coef": "TRL's loss",
    "off_policy_mask_threshold": "TRL's loss, against the stored sampling log-probs",
    "vllm_importance_sampling_correction": "truncated IS for both engines (test_trainer)",
    "vllm_importance_sampling_mode": "truncated IS (test_trainer.test_truncated_is_weight_modes)",
    "vllm_importance_sampling_clip_min": "truncated IS",
    "vllm_importance_sampling_clip_max": "truncated IS",
    "vllm_gpu_memory_utilization": "engine: vllm (runtime)",
    "vllm_enable_sleep_mode": "engine: vllm (runtime)",
    "vllm_max_model_length": "engine: vllm (runtime)",
    "vllm_server_timeout": "engine: vllm_server (start-up wait, test_vllm_server_config)",
    "model_init_kwargs": "TRL loads the policy",
    "trust_remote_code": "TRL loads the policy",
    "disable_dropout": "TRL's init",
    "cast_lm_head_to_fp32": "TRL's init (the LM head the loss and the KD term use)",
    "gradient_checkpointing_kwargs": "Trainer",
    "bf16": "Trainer",
    "fp16": "Trainer",
    "seed": "Trainer",
    "use_liger_kernel": "TRL's init (layer kernels)",
}

# The TRL methods this trainer replaces or feeds: batches and rollouts, the loss that reads them, the dataset.
REPLACED = ("_generate_and_score_completions", "_compute_loss", "get_train_dataloader", "_get_train_sampler")


def _fields_read_by_replaced_paths() -> set[str]:
    """``GRPOConfig`` fields that ``REPLACED`` and every ``GRPOTrainer`` method they call read, directly
    (``self.args.x``) or through an attribute ``__init__`` sets from them (``self.top_k``, ``self.generation_config``)."""
    import trl.trainer.grpo_trainer as grpo_module
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    tree = ast.parse(inspect.getsource(grpo_module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOTrainer")
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}

    def on_self(node, attr=None):
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and attr in (None, node.attr)
        )

    aliases: dict[str, set[str]] = {}  # self.<attr> set in __init__ -> the fields it is derived from
    local: dict[str, set[str]] = {}

    def refs(node) -> set[str]:
        out = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in fields:
                if (isinstance(sub.value, ast.Name) and sub.value.id == "args") or on_self(sub.value, "args"):
                    out.add(sub.attr)
            if on_self(sub):
                out |= aliases.get(sub.attr, set())
            elif isinstance(sub, ast.Name):
                out |= local.get(sub.id, set())
        return out

    for node in ast.walk(methods["__init__"]):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
            found = refs(node.value)
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    local.setdefault(target.id, set()).update(found)
                elif on_self(target):
                    aliases.setdefault(target.attr, set()).update(found)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value  # e.g. generation_kwargs.update(args.generation_kwargs)
            if isinstance(owner, ast.Name) and owner.id in local:
                local[owner.id] |= refs(node)

    read, seen, todo = set(), set(), list(REPLACED)
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        for sub in ast.walk(methods[name]):
            if isinstance(sub, ast.Attribute) and sub.attr in fields and on_self(sub.value, "args"):
                read.add(sub.attr)
            elif on_self(sub):
                read |= aliases.get(sub.attr, set())
                if sub.attr in methods:
                    todo.append(sub.attr)
    return read


def test_every_trl_field_of_the_replaced_paths_is_honoured_or_refused():
    from trl import GRPOConfig
    from trl.trainer.base_config import _BaseConfig

    read = _fields_read_by_replaced_paths()
    for expected in ("num_generations", "scale_rewards", "reward_weights", "top_k", "min_p", "use_vllm"):
        assert expected in read, expected  # the derivation does see what it must
    grpo_own = {f.name for f in dataclasses.fields(GRPOConfig)} - {
        f.name for f in dataclasses.fields(_BaseConfig)
    }
    unclassified = sorted((read | grpo_own) - set(REFUSED) - set(HONOURED))
    assert unclassified == [], (
        f"classify these TRL fields (honour or refuse them in OpenClawConfig): {unclassified}"
    )
    assert not set(REFUSED) & set(HONOURED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_inapplicable_trl_field_is_refused_with_what_to_use(name):
    value, hint = REFUSED[name]
    with pytest.raises(ValueError) as err:
        OpenClawConfig(output_dir="/tmp/unused", report_to="none", **{name: value})
    assert name in str(err.value) and hint in str(err.value)


def test_defaults_and_honoured_values_are_accepted():
    OpenClawConfig(output_dir="/tmp/unused", report_to="none")
    OpenClawConfig(
        output_dir="/tmp/unused",
        report_to="none",
        beta=0.04,
        mask_truncated_completions=True,
        delta=1.5,
        top_entropy_quantile=0.5,
        importance_sampling_level="sequence",
        off_policy_mask_threshold=0.5,
        shuffle_dataset=False,
        scale_rewards="group",
        generation_batch_size=16,
    )
