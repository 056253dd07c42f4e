"""The vLLM engine's owner thread: jobs in, requests into vLLM, one engine step at a time, results out.

The thread takes every queued job without waiting while work is under way (``_accept``): a ``publish`` registers
its adapter at once, a control ``call`` (sleep, wake, a full weight push) waits until no request is in vLLM
(``_run_deferred``) and whatever arrives behind it waits too; ``serve`` rows enter vLLM at once and ``learn``
rows while fewer than ``max_learn_requests`` run there (``_admit_pending``). Each ``_step`` advances every
request in vLLM by one token and finishes those done: a generation's candidates (re-scored first when
truncated sampling at T = 1, or with the full vocabulary, needs the convention's log-probs), a scoring row's
log-probs. A failed step fails every caller in flight and the thread goes on serving.
"""

from __future__ import annotations

import logging

from openclaw_trl.engines.vllm_requests import LiveRequest, complete, generation_request, rescore_request
from openclaw_trl.engines.vllm_scores import completion_scores, generation_params, score_params
from openclaw_trl.engines.worker import Job

logger = logging.getLogger(__name__)


class VLLMLoop:
    """A mixin of ``VLLMEngine``: its owner thread (``_worker_loop``) over the engine's queue (``_worker``), its
    pending rows (``_pending``), the control calls waiting for an idle engine (``_deferred``), the requests in
    vLLM (``_in_vllm``: ``vllm_requests.InVLLM``), the adapters (``_loras``) and ``llm`` (``vllm.LLM``)."""

    def _worker_loop(self) -> None:
        while True:
            idle = not self._in_vllm and not self._deferred and not len(self._pending)
            job = self._worker.next_job(None if idle else 0)
            while job is not False:
                if job is None:
                    self._abort_all(RuntimeError("VLLMEngine closed"))
                    return
                self._accept(job)
                job = self._worker.next_job(0)
            if self._deferred:
                self._run_deferred()
            self._in_vllm.abort_cancelled()
            self._admit_pending()
            if self._in_vllm:
                try:
                    self._step()
                except BaseException as exc:  # noqa: BLE001 - fail the callers, keep serving
                    logger.exception("vLLM step failed")
                    self._abort_all(exc)

    def _accept(self, job: Job) -> None:
        """Start a job. Control calls need an idle engine, so they (and whatever queues behind them) wait."""
        try:
            if job.kind == "publish":
                self._wake()
                lora_id, path, version, name = job.payload
                self._loras.register(lora_id, path, version, name)
                if name is None:
                    self.policy_version = version
                else:
                    self._versions[name] = version
                job.finish_one()
            elif job.kind == "call" or self._deferred:
                self._deferred.append(job)
            else:
                self._pending.add(job)
        except BaseException as exc:  # noqa: BLE001
            job.fail(exc)

    def _admit_pending(self) -> None:
        """Move every ``serve`` row into vLLM, and ``learn`` rows while fewer than ``max_learn_requests`` run
        there (none while a control call waits for an idle engine)."""
        if self._deferred:
            return
        rows = self._pending.take("serve", len(self._pending))
        free = self.max_learn_requests - self._in_vllm.learning
        if free > 0:
            rows += self._pending.take("learn", free)
        for job, index in rows:
            try:
                self._wake()
                self._add_row(job, index)
            except BaseException as exc:  # noqa: BLE001
                job.fail(exc)

    def _run_deferred(self) -> None:
        """Run waiting control calls once no request is in flight; accept the jobs queued behind them."""
        while self._deferred:
            job = self._deferred[0]
            if job.kind == "call":
                if self._in_vllm:
                    return
                self._deferred.pop(0)
                try:
                    job.value = self._do_call(*job.payload)
                except BaseException as exc:  # noqa: BLE001
                    job.fail(exc)
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

    def _add_row(self, job: Job, i: int) -> None:
        """Add row ``i`` of a ``gen`` or ``score`` job to vLLM (an empty completion is scored at once)."""
        if job.kind == "gen":
            req = job.payload[i]
            lora = self._loras.for_weights(req.weights, req.adapter)
            live = generation_request(job, i, lora, self.adapter_version(req.adapter))
            self._in_vllm.add(live, req.prompt_ids, generation_params(req.sampling))
            return
        pairs, weights, top_k, temperature, adapter = job.payload
        p, c = pairs[i]
        if not c:
            job.finish_one(i, ([], [], []))
            return
        lora, version = self._loras.for_weights(weights, adapter), self.adapter_version(adapter)
        live = LiveRequest("score", job, i, lora, version, prompt_len=len(p))
        live.top_k, live.temperature, live.tokens = top_k, temperature, list(c)
        self._in_vllm.add(live, list(p) + list(c), score_params(top_k, temperature))

    def _step(self) -> None:
        self._in_vllm.step(self._finish)
        self._loras.collect()

    def _finish(self, live: LiveRequest, out) -> None:
        if live.kind == "gen":
            for cand in live.candidates or [live]:
                self._finish_candidate(cand)
            return
        scores = completion_scores(
            out.prompt_logprobs, live.prompt_len, live.tokens, live.temperature, live.top_k
        )
        if live.kind == "score":
            live.job.finish_one(live.index, scores)
        else:  # rescore of a truncated-sampling generation
            live.logprobs = scores[0]
            complete(live)

    def _finish_candidate(self, live: LiveRequest) -> None:
        """A generated candidate is complete, or re-scored first when truncated sampling needs it."""
        sp = live.request.sampling
        truncated = sp.temperature > 0 and (sp.top_p < 1.0 or sp.top_k > 0)
        if truncated and live.tokens:
            if sp.temperature == 1.0 or self.full_vocab:
                self._rescore(live)  # convention log-probs on the same adapter; completes later
                return
            if not self._warned_truncation:
                logger.warning(
                    "top_p/top_k sampling at T != 1: returning vLLM's renormalised log-probs; build "
                    "VLLMEngine(max_logprobs=-1) for exact full-vocabulary values"
                )
                self._warned_truncation = True
        complete(live)

    def _rescore(self, live: LiveRequest) -> None:
        again = rescore_request(live)
        prompt = list(live.request.prompt_ids) + live.tokens
        self._in_vllm.add(again, prompt, score_params(0, live.request.sampling.temperature))

    def _abort_all(self, exc: BaseException) -> None:
        """Abort every request in vLLM and fail every job that waits: in vLLM, pending, or deferred."""
        for job in self._in_vllm.abort_all() + self._deferred:
            job.fail(exc)
        self._pending.fail_all(exc)
        self._deferred = []
