"""How ``OpenClawConfig`` fits TRL's ``GRPOConfig``: the fields that do not apply, the batch geometry and
the defaults of live training.

A live turn is sampled by the serving engine, has one completion and one judged reward, so TRL's fields of
generation, reward aggregation, completion logging and the dataset are accepted only at the value that
matches what runs; any other value is refused with an error that says why and what to use instead. The
engine fields of the engine that does not run are refused the same way.
"""

from __future__ import annotations

import dataclasses
import os

VLLM_ONLY_FIELDS = ("vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "vllm_max_model_length")
"""``GRPOConfig`` fields that configure ``engine: vllm``; with another engine they must keep TRL's defaults."""

VLLM_SERVER_FIELDS = (
    "vllm_server_urls",
    "vllm_server_api_key_env",
    "vllm_server_adapter_dir",
    "vllm_server_request_timeout",
    "vllm_server_max_learn_requests",
    "vllm_server_timeout",
)
"""Fields that configure ``engine: vllm_server``; with another engine they must keep their defaults."""


def refuse_inapplicable_trl_fields(config) -> None:
    """TRL fields whose code paths this trainer replaces: accepted only at the value that matches what runs."""
    generated = "the serving engine samples every turn (TRL does not generate here)"
    server = (
        "TRL's own vLLM server client is not used, so there is no separate vLLM server of TRL's: for stock "
        "vLLM servers use engine: vllm_server with vllm_server_urls"
    )
    per_request = (
        "trainable turns are sampled from the full distribution at the training temperature; each chat "
        "request's own top_p, top_k, ... apply to its untrainable turns"
    )
    derived = "the batch geometry is derived from batch_size and per_device_train_batch_size: set batch_size"
    logged = "every turn and sample is kept in the store: read them with openclaw-trl export"
    # (field, accepted values, why it does not apply and what to use instead)
    table = [
        ("use_vllm", (False,), f"{generated}: use engine: vllm"),
        ("vllm_mode", ("colocate",), server),
        ("vllm_server_base_url", (None,), server),
        ("vllm_server_host", ("0.0.0.0",), server),
        ("vllm_server_port", (8000,), server),
        ("vllm_group_port", (51216,), server),
        ("vllm_tensor_parallel_size", (1,), "engine: vllm runs on one device"),
        ("vllm_model_impl", ("vllm",), "engine: vllm uses vLLM's own model implementation"),
        ("vllm_structured_outputs_regex", (None,), f"{generated} as each chat request asks"),
        ("use_transformers_continuous_batching", (False,), f"{generated}: use engine: hf"),
        ("use_transformers_paged", (False,), f"{generated}: use engine: hf"),
        ("transformers_continuous_batching_config", (None,), f"{generated}: use engine_max_batch_size"),
        ("cache_implementation", (None,), generated),
        ("ds3_gather_for_generation", (True,), generated),
        ("generation_kwargs", (None,), f"{generated}; {per_request}"),
        ("top_p", (1.0,), per_request),
        ("top_k", (0, None), per_request),
        ("min_p", (None,), per_request),
        ("repetition_penalty", (1.0,), per_request),
        (
            "chat_template_kwargs",
            (None,),
            "the server renders each request's messages with the chat template",
        ),
        (
            "max_tool_calling_iterations",
            (None,),
            "tools run in the client: each tool result is the next turn",
        ),
        ("pad_to_multiple_of", ("auto", None), "batches are padded to their longest sample"),
        ("generation_batch_size", (None, config.batch_size), derived),
        ("steps_per_generation", (None,), derived),
        ("gradient_accumulation_steps", (1,), derived),
        ("auto_find_batch_size", (False,), derived),
        ("num_generations_eval", (None,), "there is no evaluation dataset: use openclaw-trl eval"),
        ("eval_strategy", ("no",), "there is no evaluation dataset: use openclaw-trl eval"),
        ("per_device_eval_batch_size", (8,), "there is no evaluation dataset: use openclaw-trl eval"),
        (
            "reward_weights",
            (None,),
            "the judges give one reward per turn: weigh the terms with w_rl and w_opd",
        ),
        (
            "multi_objective_aggregation",
            ("sum_then_normalize",),
            "one judged reward per turn: nothing to aggregate",
        ),
        (
            "shuffle_dataset",
            (False, None),
            "samples are trained oldest first from the store (no dataset)",
        ),
        (
            "sync_ref_model",
            (False,),
            "the KL reference (beta) is the base model, the policy with its adapter disabled: TRL cannot sync it",
        ),
        ("ref_model_mixup_alpha", (0.6,), "it only applies with sync_ref_model"),
        ("ref_model_sync_steps", (512,), "it only applies with sync_ref_model"),
        ("log_completions", (False,), logged),
        ("log_completions_hub_repo", (None,), logged),
        ("num_completions_to_print", (None,), logged),
        ("log_unique_prompts", (False,), logged),
        ("log_multimodal", (True,), "turns are text only"),
        (
            "disable_tqdm",
            (True,),
            "live learning runs until it is stopped (max_steps is a billion when unset), so a progress bar "
            "has no end: each update is one log line, and every logged metric goes to "
            "<output_dir>/metrics.jsonl and the report_to trackers",
        ),
        (
            "vllm_importance_sampling_cap",
            (None,),
            "deprecated in TRL: use vllm_importance_sampling_clip_max",
        ),
    ]
    for name, accepted, why in table:
        value = getattr(config, name)
        if value not in accepted:
            raise ValueError(f"{name}={value!r} is not supported: {why}.")


def refuse_fields_of_the_other_engine(config) -> None:
    """Engine fields that the chosen engine cannot take: the in-process vLLM engine's, the vLLM servers' and
    the HF batch size, each with any other engine."""
    owners = [("vllm", name) for name in VLLM_ONLY_FIELDS]
    owners += [("vllm_server", name) for name in VLLM_SERVER_FIELDS]
    owners += [("hf", "engine_max_batch_size"), ("hf", "prefix_cache_mb")]
    for engine, name in owners:
        if config.engine != engine and getattr(config, name) != _default(config, name):
            raise ValueError(
                f"{name}={getattr(config, name)!r} configures engine: {engine}, but the engine is "
                f"{config.engine}: set engine: {engine} or remove {name}"
                + (
                    " (vLLM servers take these as vllm serve options)"
                    if config.engine == "vllm_server"
                    else ""
                )
            )


def check_vllm_server_fields(config) -> None:
    """``engine: vllm_server`` needs its servers' URLs (``http(s)://host:port``), positive timeouts and at
    least one learning request per server."""
    if config.engine != "vllm_server":
        return
    from openclaw_trl.engines.server_pool import normalise_url

    if not config.vllm_server_urls:
        raise ValueError(
            "engine: vllm_server needs vllm_server_urls: the roots of running vLLM servers, e.g. "
            "[http://127.0.0.1:8000] (started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve MODEL "
            "--enable-lora --logprobs-mode processed_logprobs)"
        )
    for url in config.vllm_server_urls:
        normalise_url(url)  # ValueError naming the URL
    if len({normalise_url(u) for u in config.vllm_server_urls}) != len(config.vllm_server_urls):
        raise ValueError(f"vllm_server_urls lists a server twice: {config.vllm_server_urls}")
    for name in ("vllm_server_request_timeout", "vllm_server_timeout"):
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {getattr(config, name)!r}")
    if not (
        isinstance(config.vllm_server_max_learn_requests, int) and config.vllm_server_max_learn_requests >= 1
    ):
        raise ValueError(
            f"vllm_server_max_learn_requests must be an integer >= 1, got {config.vllm_server_max_learn_requests!r}"
        )


def _default(config, name: str):
    """The default of the field ``name`` of ``config``'s dataclass."""
    (spec,) = [f for f in dataclasses.fields(config) if f.name == name]
    return spec.default_factory() if spec.default is dataclasses.MISSING else spec.default


def set_live_training_defaults(config) -> None:
    """Defaults that differ for live training: float32 and no pinned memory on CPU, no step limit."""
    import torch

    if not torch.cuda.is_available():
        if config.bf16 is None and not config.fp16:
            config.bf16 = False  # float32: bf16 is ~160x slower on this kind of CPU
        config.dataloader_pin_memory = False  # the placeholder loader carries no tensors worth pinning
    if config.max_steps is None or config.max_steps <= 0:
        config.max_steps = 10**9  # live learning has no dataset length: it runs until stopped
    _map_activation_checkpointing(config)


def _map_activation_checkpointing(config) -> None:
    """``activation_checkpointing`` is the name of recent ``transformers``; older releases (5.17 and before)
    only know ``gradient_checkpointing``, and there our field would be read by nobody: map it."""
    import dataclasses

    from transformers import TrainingArguments

    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "activation_checkpointing" not in known and config.activation_checkpointing:
        config.gradient_checkpointing = True


def derive_batch_geometry(config) -> None:
    """One update = ``batch_size`` samples = ``steps_per_generation`` micro-batches, one optimizer step.

    Each of the ``world_size`` processes takes micro-batches of ``per_device_train_batch_size`` samples
    (at most ``batch_size // world_size``), so ``steps_per_generation = batch_size / (micro x world)``
    micro-batches are accumulated into one optimizer step. ``num_iterations`` > 1 reuses the batch for more
    optimizer steps (PPO clipping then matters).
    """
    config.num_generations = 1
    world = config.world_size
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != world:
        raise ValueError(
            f"{launched} processes were launched (WORLD_SIZE) but the Trainer runs {world}: on CPU set "
            "use_cpu: true (--use_cpu true) so the processes train together over gloo"
        )
    micro = min(config.per_device_train_batch_size, max(1, config.batch_size // world))
    if config.batch_size % (micro * world) != 0:
        raise ValueError(
            f"batch_size ({config.batch_size}) must be divisible by per_device_train_batch_size ({micro}) x "
            f"processes ({world}); pick e.g. batch_size={micro * world * max(1, config.batch_size // (micro * world))}."
        )
    config.per_device_train_batch_size = micro
    config.steps_per_generation = config.batch_size // (micro * world)
    config.gradient_accumulation_steps = config.steps_per_generation
    config.generation_batch_size = config.batch_size


def check_importance_sampling_clip(config) -> None:
    """The truncated importance-sampling bounds: a maximum when the correction is on, and min < max."""
    if config.vllm_importance_sampling_correction and config.vllm_importance_sampling_clip_max is None:
        raise ValueError("vllm_importance_sampling_clip_max must be set when the correction is on.")
    low, high = config.vllm_importance_sampling_clip_min, config.vllm_importance_sampling_clip_max
    if low is not None and high is not None and low >= high:
        raise ValueError(
            f"vllm_importance_sampling_clip_min ({low}) must be less than vllm_importance_sampling_clip_max ({high})."
        )


def check_trackers(config) -> None:
    """``report_to: trackio`` has its package, and a run has a stable name.

    ``run_name`` defaults to the last part of ``output_dir``, so a restarted run logs on to the same tracker
    run (Trackio resumes a run by its name) instead of starting one under a random name.
    """
    import importlib.util
    from pathlib import Path

    if "trackio" in (config.report_to or []) and importlib.util.find_spec("trackio") is None:
        raise ValueError(
            "report_to: trackio needs the trackio package, which is not installed: pip install trackio "
            "(it is in openclaw-trl's dev extra), or remove it from report_to"
        )
    if config.run_name is None and config.output_dir:
        config.run_name = Path(config.output_dir).name or None


def check_adapter_history(config) -> None:
    """``adapter_history: N > 0`` needs a full checkpoint of every update, the last N kept: ``save_strategy:
    steps``, ``save_steps: 1`` and ``save_total_limit`` N (set when unset); anything else is refused."""
    n = config.adapter_history
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"adapter_history must be an integer >= 0 (0 keeps no history), got {n!r}")
    if n == 0:
        return
    fix = "set adapter_history: 0 to checkpoint on your own schedule (then without rollback)"
    strategy = getattr(config.save_strategy, "value", config.save_strategy)
    if strategy != "steps" or config.save_steps != 1:
        raise ValueError(
            f"adapter_history: {n} keeps every update restorable, so each update is checkpointed "
            f"(save_strategy: steps, save_steps: 1), but save_strategy is {strategy!r} and save_steps "
            f"{config.save_steps!r}: remove save_strategy and save_steps, or {fix}"
        )
    if config.save_total_limit is None:
        config.save_total_limit = n
    elif config.save_total_limit != n:
        raise ValueError(
            f"adapter_history: {n} keeps the last {n} checkpoints, but save_total_limit is "
            f"{config.save_total_limit}: remove save_total_limit, or {fix}"
        )
    if config.save_only_model:
        raise ValueError(
            f"adapter_history: {n} restores the optimizer and scheduler with a version, but save_only_model "
            f"leaves them out of the checkpoints: remove save_only_model, or {fix}"
        )
