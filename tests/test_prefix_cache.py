"""The HF engine's prefix KV cache: the same completions, log-probs and scores with and without it, reuse of an
agent's shared prefix across turns and by the teacher, weights-aware entries, and the LRU memory bound."""

from __future__ import annotations

import engine_contract as contract
import pytest

from openclaw_trl.chat import render_prompt_ids
from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine
from openclaw_trl.engines.prefix_cache import PrefixCache
from openclaw_trl.judge import append_hint

SYSTEM = "You are a coding agent. Follow the rules below carefully. " * 12
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Tool number {i} reads and writes files in the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for i in range(3)
]
TOL = 1e-5


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    """The same weights without (``plain``) and with (``cached``) the prefix cache."""
    kwargs = dict(dtype="float32", lora_config=contract.lora_config(), max_batch_size=8, batch_wait_s=0.05)
    plain = create_engine("hf", tiny_model_dir, prefix_cache_mb=0, **kwargs)
    cached = create_engine("hf", tiny_model_dir, prefix_cache_mb=64, prefix_cache_min_tokens=16, **kwargs)
    yield plain, cached
    plain.close()
    cached.close()


def _session(tokenizer, turns: int) -> list[list[dict]]:
    """The message lists of an agent-shaped session's turns: each re-sends the whole history."""
    messages = [{"role": "system", "content": SYSTEM}]
    out = []
    for t in range(turns):
        messages = messages + [{"role": "user", "content": f"step {t}: please update the file number {t}"}]
        out.append(messages)
        messages = messages + [{"role": "assistant", "content": f"done with step {t}"}]
    return out


def _same(a, b) -> None:
    assert a.token_ids == b.token_ids
    assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < TOL


def _generate(engine, prompt, seed, weights="policy", temperature=0.0):
    sp = SamplingParams(temperature=temperature, max_new_tokens=8, seed=seed)
    return engine.generate([GenerationRequest(prompt, sp, weights)])[0]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_turns_reuse_the_shared_prefix_with_identical_results(engines, tiny_tokenizer, temperature):
    """Turn 2 of a session starts from turn 1's cached prompt: greedy ids equal, log-probs within 1e-5 of a
    full prefill, and only the new tokens are prefilled."""
    plain, cached = engines
    turns = [render_prompt_ids(tiny_tokenizer, m, TOOLS) for m in _session(tiny_tokenizer, 3)]
    for n, prompt in enumerate(turns):
        before = dict(cached.stats), dict(cached.prefix_cache.stats)
        _same(
            _generate(plain, prompt, n, temperature=temperature),
            _generate(cached, prompt, n, temperature=temperature),
        )
        computed = cached.stats["prefill_tokens"] - before[0]["prefill_tokens"]
        reused = cached.prefix_cache.stats["reused_tokens"] - before[1]["reused_tokens"]
        assert computed + reused == len(prompt)
        if n > 0:  # everything up to the previous turn's prompt is shared
            assert reused >= len(turns[n - 1]) - 8, (reused, len(turns[n - 1]))
            assert computed < len(prompt) - len(turns[0]) // 2


def test_prefix_cache_is_the_one_the_engine_uses(engines, tiny_tokenizer):
    """``engine.prefix_cache`` is the cache the engine's thread reads and fills: its stats count a served turn 2's
    reuse of turn 1, ``clear()`` makes the next turn compute every token (same results), and replacing the
    attribute (which the thread would never see) is refused."""
    _, cached = engines
    turns = [render_prompt_ids(tiny_tokenizer, m, TOOLS) for m in _session(tiny_tokenizer, 2)]
    cache = cached.prefix_cache
    cache.clear()
    _generate(cached, turns[0], 0)
    before = cache.stats["reused_tokens"]
    reused = _generate(cached, turns[1], 1)
    assert cache.stats["reused_tokens"] - before >= len(turns[0]) - 8
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.enabled
    before = dict(cached.stats), cache.stats["reused_tokens"]
    full = _generate(cached, turns[1], 1)
    assert cache.stats["reused_tokens"] == before[1]
    assert cached.stats["prefill_tokens"] - before[0]["prefill_tokens"] == len(turns[1])
    _same(reused, full)
    with pytest.raises(AttributeError):
        cached.prefix_cache = PrefixCache(0)
    assert cached.prefix_cache is cache


def test_batch_of_cached_prompts_equals_plain_prefill(engines, tiny_tokenizer):
    """Several distinct prompts in one batch (their caches left-padded into one) and ``n`` candidates."""
    plain, cached = engines
    turns = [render_prompt_ids(tiny_tokenizer, m, TOOLS) for m in _session(tiny_tokenizer, 3)]
    short = contract.prompts(tiny_tokenizer, 1)[0]
    reqs = [
        GenerationRequest(p, SamplingParams(temperature=0.8, max_new_tokens=6, seed=s, n=n))
        for p, s, n in [(turns[2], 1, 2), (turns[0], 2, 1), (short, 3, 1), (turns[1], 4, 1)]
    ]
    for a, b in zip(plain.generate(reqs), cached.generate(reqs)):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4  # batched vs alone (plain)


def test_teacher_scoring_reuses_the_prefix_up_to_the_last_user_message(engines, tiny_tokenizer):
    """The hint goes at the end of the last user message: the teacher's prompt shares all before it with the
    turn's served prompt (base weights here: no adapter published), and its scores (log-probs, top-K) equal a
    full forward's."""
    plain, cached = engines
    messages = _session(tiny_tokenizer, 2)[-1]
    prompt = render_prompt_ids(tiny_tokenizer, messages, TOOLS)
    reply = _generate(cached, prompt, 5, weights="base").token_ids
    teacher = render_prompt_ids(tiny_tokenizer, append_hint(messages, "use the tool first"), TOOLS)
    shared = next(i for i, (a, b) in enumerate(zip(prompt, teacher)) if a != b)
    before = cached.prefix_cache.stats["reused_tokens"]
    got = cached.score([teacher], [reply], weights="base", top_k=5, temperature=0.7)
    assert cached.prefix_cache.stats["reused_tokens"] - before == shared
    want = plain.score([teacher], [reply], weights="base", top_k=5, temperature=0.7)
    assert max(abs(x - y) for x, y in zip(got.logprobs[0], want.logprobs[0])) < TOL
    assert got.topk_ids == want.topk_ids
    # scoring the served turn itself (top_logprobs of a reply) reuses the whole prompt but its last token
    before = cached.prefix_cache.stats["reused_tokens"]
    again = cached.score([prompt], [reply], weights="base", priority="serve")
    assert cached.prefix_cache.stats["reused_tokens"] - before == len(prompt) - 1
    plain_again = plain.score([prompt], [reply], weights="base", priority="serve")
    assert max(abs(x - y) for x, y in zip(again.logprobs[0], plain_again.logprobs[0])) < TOL


def test_entries_are_valid_only_for_their_weights(engines, tiny_tokenizer, adapters):
    """A published adapter never reuses the KV of the base weights or of an earlier adapter; the entries of
    weights no longer served are dropped."""
    plain, cached = engines
    prompt = render_prompt_ids(tiny_tokenizer, _session(tiny_tokenizer, 1)[0], TOOLS)
    _same(_generate(plain, prompt, 0), _generate(cached, prompt, 0))  # base weights until a publish
    for adapter in adapters:
        version = contract.next_version()
        plain.publish_adapter(adapter, version)
        cached.publish_adapter(adapter, version)
        hits = cached.prefix_cache.stats["hits"]
        _same(_generate(plain, prompt, 0), _generate(cached, prompt, 0))
        assert cached.prefix_cache.stats["hits"] == hits  # nothing cached for this adapter yet
        _same(_generate(plain, prompt, 0), _generate(cached, prompt, 0))
        assert cached.prefix_cache.stats["hits"] == hits + 1
        keys = {e.key for e in cached.prefix_cache._entries.values()}
        assert keys <= cached.model.served_keys() and len(keys - {"base"}) == 1
    # the base weights still reuse their own entries, and give the base model's results
    _same(_generate(plain, prompt, 0, weights="base"), _generate(cached, prompt, 0, weights="base"))


def test_lru_memory_bound_and_prefix_replacement():
    import torch

    def layers(n):  # 2 layers x (k, v) of n positions, 64 bytes each per position
        return [(torch.zeros(1, 1, n, 16), torch.zeros(1, 1, n, 16)) for _ in range(2)]

    cache = PrefixCache(max_bytes=256 * 40, min_tokens=4)  # room for 40 positions
    cache.store("base", list(range(10)), layers(10))
    cache.store("base", list(range(20)), layers(20))  # extends the first: replaces it
    assert len(cache) == 1 and cache.nbytes == 256 * 20
    cache.store("base", list(range(15)), layers(15))  # starts the cached one: nothing new to keep
    assert len(cache) == 1
    cache.store("base", [7] * 15, layers(15))
    assert cache.lookup("base", list(range(30)), limit=29)[0] == 20  # the first is now the most recent
    cache.store("base", [8] * 15, layers(15))  # 50 > 40: the least recently used ([7] * 15) goes
    assert cache.nbytes <= cache.max_bytes and cache.stats["evicted"] == 1
    assert cache.lookup("base", [7] * 15, limit=14) == (0, None)
    m, got = cache.lookup("base", [8] * 12, limit=11)
    assert m == 11 and got[0][0].shape[2] == 11
    assert cache.lookup("slot0#1", [8] * 12, limit=11) == (0, None)  # other weights
    cache.store("base", list(range(100, 150)), layers(50))  # larger than the whole budget: not kept
    assert cache.lookup("base", list(range(100, 150)), limit=49) == (0, None)
    assert cache.lookup("base", [1, 2, 3], limit=2) == (0, None)  # shorter than min_tokens
    cache.retain({"slot1#2"})
    assert len(cache) == 0 and cache.nbytes == 0
    cache.store("base", list(range(10)), layers(10))  # weights no longer served: ignored
    assert len(cache) == 0
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(max_bytes=-1)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"prefix_cache_mb": -1}, "prefix_cache_mb must be an integer >= 0"),
        ({"prefix_cache_mb": True}, "prefix_cache_mb must be an integer >= 0"),
        (
            {"prefix_cache_mb": 512, "engine": "vllm", "temperature": 1.0},
            "prefix_cache_mb=512 configures engine: hf",
        ),
    ],
)
def test_recipe_field_is_validated(tmp_path, fields, message):
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(ValueError, match=message):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", **fields)


def test_recipe_field_reaches_the_engine(tmp_path, tiny_model_dir):
    from openclaw_trl.config import OpenClawConfig

    kwargs = OpenClawConfig(output_dir=str(tmp_path), report_to="none", prefix_cache_mb=0).engine_kwargs()
    assert kwargs["prefix_cache_mb"] == 0
    engine = create_engine("hf", tiny_model_dir, **kwargs)
    try:
        assert not engine.prefix_cache.enabled
    finally:
        engine.close()
    default = OpenClawConfig(output_dir=str(tmp_path), report_to="none").engine_kwargs()
    assert default["prefix_cache_mb"] == 4096
