"""Engine contract checks shared by the HF tests and the vLLM tests (``tests/vllm_engine``).

``EngineContract`` runs them all as tests for a module's ``engine`` fixture. Each ``check_*`` function takes a live engine (anything implementing ``openclaw_trl.engines.Engine``) plus
the tiny model's tokenizer and asserts one promise of ``engines/base.py``. Tolerances are arguments because
vLLM's CPU kernels do not reproduce Transformers' float32 arithmetic bit for bit.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from openclaw_trl.engines import GenerationRequest, SamplingParams
from tests.helpers import wait_until, wait_until_steady

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
_versions = itertools.count(1)


def next_version() -> int:
    """A fresh, increasing policy version (engines may be shared by several tests)."""
    return next(_versions)


def lora_config(r: int = 8):
    from peft import LoraConfig

    return LoraConfig(
        r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM"
    )


def random_adapter(model_dir, config, seed: int, std: float = 0.1) -> dict:
    """A non-zero LoRA state dict (PEFT layout, as ``get_peft_model_state_dict`` returns) for ``model_dir``."""
    import torch
    from peft import get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def prompts(tokenizer, n: int = 3) -> list[list[int]]:
    """Chat prompts of different lengths (so batches are padded)."""
    from openclaw_trl.chat import render_prompt_ids

    texts = ["hello", "please help me write code for the sum of two numbers", "what is the weather today?"]
    return [
        render_prompt_ids(tokenizer, [{"role": "user", "content": texts[i % 3] + " again" * (i // 3)}])
        for i in range(n)
    ]


def _max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def check_generate_shapes(engine, tokenizer) -> None:
    ps = prompts(tokenizer)
    reqs = [
        GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=6, seed=i))
        for i, p in enumerate(ps)
    ]
    outs = engine.generate(reqs)
    assert len(outs) == len(ps)
    for out in outs:
        assert 1 <= len(out.token_ids) <= 6
        assert len(out.logprobs) == len(out.token_ids)
        assert all(isinstance(t, int) for t in out.token_ids)
        assert all(lp <= 1e-6 for lp in out.logprobs)
        assert out.finish_reason in ("stop", "length")
        assert out.policy_version == engine.policy_version


def check_score_matches_generate(
    engine, tokenizer, temperature: float, weights: str = "policy", tol: float = 1e-4
):
    """``score`` on the sampled ids reproduces the sampling log-probs (same temperature convention)."""
    ps = prompts(tokenizer)
    sp = [SamplingParams(temperature=temperature, max_new_tokens=8, seed=10 + i) for i in range(len(ps))]
    outs = engine.generate([GenerationRequest(p, s, weights) for p, s in zip(ps, sp)])
    scores = engine.score(
        ps, [o.token_ids for o in outs], weights=weights, temperature=sp[0].logprob_temperature
    )
    diffs = [_max_diff(o.logprobs, lp) for o, lp in zip(outs, scores.logprobs)]
    assert max(diffs) < tol, diffs
    return max(diffs)


def check_topk_contains_sampled(engine, tokenizer, k: int) -> None:
    ps = prompts(tokenizer, 2)
    outs = engine.generate([GenerationRequest(p, SamplingParams(max_new_tokens=4, seed=3)) for p in ps])
    comp = [o.token_ids for o in outs]
    scores = engine.score(ps, comp, weights="policy", top_k=k)
    for c, lp, ids, tlp in zip(comp, scores.logprobs, scores.topk_ids, scores.topk_logprobs):
        assert len(ids) == len(c) == len(tlp) == len(lp)
        for j, token in enumerate(c):
            assert len(ids[j]) == k
            assert token in ids[j]
            assert abs(tlp[j][ids[j].index(token)] - lp[j]) < 1e-4
            assert all(a >= b - 1e-6 for a, b in zip(tlp[j], tlp[j][1:]))  # sorted, most likely first


def check_base_vs_policy(engine, tokenizer, adapter: dict) -> None:
    """Publishing a non-zero adapter changes ``policy`` and leaves ``base`` untouched."""
    ps = prompts(tokenizer, 2)
    comp = [
        o.token_ids
        for o in engine.generate([GenerationRequest(p, SamplingParams(max_new_tokens=5, seed=7)) for p in ps])
    ]
    base_before = engine.score(ps, comp, weights="base").logprobs
    version = next_version()
    engine.publish_adapter(adapter, version)
    assert engine.policy_version == version
    base_after = engine.score(ps, comp, weights="base").logprobs
    policy = engine.score(ps, comp, weights="policy").logprobs
    assert max(_max_diff(a, b) for a, b in zip(base_before, base_after)) < 1e-5
    assert max(_max_diff(a, b) for a, b in zip(base_after, policy)) > 1e-3
    out = engine.generate([GenerationRequest(ps[0], SamplingParams(max_new_tokens=2), "policy")])[0]
    assert out.policy_version == version


def check_seed_reproducible(engine, tokenizer) -> None:
    p = prompts(tokenizer, 1)[0]
    req = GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=8, seed=1234))
    a, b = (
        engine.generate([req])[0],
        engine.generate([req, GenerationRequest(p, SamplingParams(seed=99, max_new_tokens=3))])[0],
    )
    assert a.token_ids == b.token_ids
    other = engine.generate(
        [GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=8, seed=4321))]
    )[0]
    assert (
        other.token_ids != a.token_ids
    )  # 8 near-uniform draws over ~2k tokens: a collision is impossible in practice


def check_finish_length(engine, tokenizer) -> None:
    p = prompts(tokenizer, 1)[0]
    out = engine.generate([GenerationRequest(p, SamplingParams(temperature=0.0, max_new_tokens=3))])[0]
    if out.finish_reason == "length":
        assert len(out.token_ids) == 3
    else:  # greedy hit an end token first: then it is the last token
        assert len(out.token_ids) <= 3


def check_stop_strings(engine, tokenizer) -> None:
    """A stop string ends the completion right at the token that completes it; the stop text stays in the ids."""
    p = prompts(tokenizer, 1)[0]
    sp = dict(temperature=1.0, max_new_tokens=12, seed=5)
    full = engine.generate([GenerationRequest(p, SamplingParams(**sp))])[0]
    texts = [tokenizer.decode(full.token_ids[: j + 1]) for j in range(len(full.token_ids))]
    stop = next((t[-2:] for t in texts[2:] if len(t.strip()) >= 2), None)
    assert stop is not None, texts
    expected = next(j for j, t in enumerate(texts) if stop in t) + 1
    out = engine.generate([GenerationRequest(p, SamplingParams(**sp, stop=[stop]))])[0]
    assert out.finish_reason == "stop"
    assert out.token_ids == full.token_ids[:expected]
    assert stop in tokenizer.decode(out.token_ids)


def check_concurrent_publish(
    engine,
    tokenizer,
    adapter_a: dict,
    adapter_b: dict,
    threads: int = 4,
    rounds: int = 3,
):
    """Greedy generations racing with publishes return exactly the old or the new adapter's output, tagged with
    the version that produced them."""
    p = prompts(tokenizer, 1)[0]
    req = GenerationRequest(p, SamplingParams(temperature=0.0, max_new_tokens=6))
    refs, owner = {}, {}
    for name, adapter in (("a", adapter_a), ("b", adapter_b)):
        version = next_version()
        engine.publish_adapter(adapter, version)
        refs[name] = engine.generate([req])[0].token_ids
        owner[version] = name
    assert refs["a"] != refs["b"], "adapters too weak to change the greedy output"
    results, errors = [], []

    def worker():
        try:
            for _ in range(rounds):
                out = engine.generate([req, req])
                results.extend((o.policy_version, o.token_ids) for o in out)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for i in range(2 * rounds):
        name = "a" if i % 2 == 0 else "b"
        version = next_version()
        owner[version] = name
        seen = len(results)
        engine.publish_adapter(adapter_a if name == "a" else adapter_b, version)
        wait_until(  # some generations return after this publish (unless the workers are done)
            lambda seen=seen: len(results) > seen or not any(t.is_alive() for t in pool), 300, "a generation"
        )
    for t in pool:
        t.join(timeout=300)
    assert not errors, errors
    assert len(results) == threads * rounds * 2
    for version, ids in results:
        assert ids == refs[owner[version]], (version, ids, refs)


def check_serving_ahead_of_learning(
    engine, tokenizer, score_calls: int = 2, pairs: int = 8, judge_rows: int = 8, judge_tokens: int = 200
) -> None:
    """A chat request sent while judge votes are being sampled, with teacher scoring queued behind them (all
    ``priority="learn"``), is answered before most of that work: before the judge has sampled half of its
    tokens and before most learning calls return. The checks are on the order of events, not on durations."""
    p = prompts(tokenizer, 1)[0]
    long_pair = (p * 40)[:400]
    returned: list[str] = []  # the calls in the order they returned
    judge_streamed: list[int] = []
    errors: list[BaseException] = []

    def learn(name, call):
        try:
            call()
            returned.append(name)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    judge = GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=judge_tokens), weights="base")
    calls = {
        "judge": lambda: engine.generate(
            [judge] * judge_rows, on_token=lambda i, t: judge_streamed.append(t), priority="learn"
        )
    }
    for i in range(score_calls):
        calls[f"score{i}"] = lambda: engine.score(
            [long_pair[:200]] * pairs, [long_pair[200:]] * pairs, weights="base", priority="learn"
        )
    pool = [threading.Thread(target=learn, args=item) for item in calls.items()]
    pool[0].start()
    wait_until(lambda: judge_streamed, 300, "the judge's first token")  # the learning work runs
    for t in pool[1:]:
        t.start()
    chat = engine.generate([GenerationRequest(p, SamplingParams(temperature=0.0, max_new_tokens=4))])[0]
    streamed_when_answered = len(judge_streamed)
    returned.append("chat")
    for t in pool:
        t.join(timeout=600)
    assert not errors, errors
    assert len(chat.token_ids) >= 1
    assert returned.index("chat") <= len(calls) // 2, returned
    assert streamed_when_answered < len(judge_streamed) / 2, (streamed_when_answered, len(judge_streamed))


def check_gave_up_work_is_cancelled(engine, tokenizer, timeout_s: float = 0.5) -> None:
    """A caller that gives up (``timeout_s``) gets ``TimeoutError`` and its work stops: no token is sampled for
    it afterwards, and the next request is answered (a slow stream callback makes the abandoned generation
    last minutes if it ran to its end)."""
    p = prompts(tokenizer, 1)[0]
    streamed = []

    def slow(index, token):
        streamed.append(token)
        time.sleep(0.02)

    long = GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=400), weights="base")
    with pytest.raises(TimeoutError, match="cancelled"):
        engine.generate([long] * 4, on_token=slow, priority="learn", timeout_s=timeout_s)
    seen = wait_until_steady(lambda: len(streamed), what="the abandoned generation")  # stops at its next step
    assert seen < 4 * 400
    chat = engine.generate([GenerationRequest(p, SamplingParams(temperature=0.0, max_new_tokens=2))])[0]
    assert len(chat.token_ids) >= 1
    with pytest.raises(ValueError, match="timeout_s"):
        engine.generate([GenerationRequest(p, SamplingParams(max_new_tokens=1))], timeout_s=0)


def check_invalid_arguments(engine, tokenizer) -> None:
    """``generate`` and ``score`` refuse out-of-range arguments with a ``ValueError`` that names them."""
    p = prompts(tokenizer, 1)[0]
    bad_sampling = {
        "temperature": SamplingParams(temperature=-0.5),
        "top_p": SamplingParams(top_p=0.0),
        "top_k": SamplingParams(top_k=-1),
        "max_new_tokens": SamplingParams(max_new_tokens=-1),
    }
    for name, sp in bad_sampling.items():
        with pytest.raises(ValueError, match=name):
            engine.generate([GenerationRequest(p, sp)])
    with pytest.raises(ValueError, match="prompt token"):
        engine.generate([GenerationRequest([], SamplingParams())])
    with pytest.raises(ValueError, match="weights"):
        engine.generate([GenerationRequest(p, SamplingParams(), weights="teacher")])
    with pytest.raises(ValueError, match="priority"):
        engine.generate([GenerationRequest(p, SamplingParams())], priority="later")
    calls = {
        "same length": dict(prompt_ids=[p, p], completion_ids=[[5]]),
        "temperature": dict(prompt_ids=[p], completion_ids=[[5]], temperature=0.0),
        "top_k": dict(prompt_ids=[p], completion_ids=[[5]], top_k=-2),
        "weights": dict(prompt_ids=[p], completion_ids=[[5]], weights="teacher"),
        "prompt token": dict(prompt_ids=[[]], completion_ids=[[5]]),
        "priority": dict(prompt_ids=[p], completion_ids=[[5]], priority="later"),
    }
    for message, kwargs in calls.items():
        with pytest.raises(ValueError, match=message):
            engine.score(**kwargs)


def check_n_candidates(engine, tokenizer, tol: float = 1e-4) -> None:
    """``sampling.n``: ``n`` completions per request, consecutively in the returned list, each streamed under
    its flat index, with its own ids, log-probs (reproduced by ``score``), finish reason and policy version;
    a seeded request gives the same candidates again, and ``n = 0`` is refused."""
    ps = prompts(tokenizer, 2)
    reqs = [
        GenerationRequest(ps[0], SamplingParams(temperature=1.0, max_new_tokens=6, seed=21, n=3)),
        GenerationRequest(ps[1], SamplingParams(temperature=1.0, max_new_tokens=4, seed=5)),
    ]
    seen: dict[int, list[int]] = {i: [] for i in range(4)}
    outs = engine.generate(reqs, on_token=lambda i, t: seen[i].append(t))
    assert len(outs) == 4
    assert [seen[i] for i in range(4)] == [o.token_ids for o in outs]
    for out, limit in zip(outs, [6, 6, 6, 4]):
        assert 1 <= len(out.token_ids) <= limit and len(out.logprobs) == len(out.token_ids)
        assert out.finish_reason in ("stop", "length") and out.policy_version == engine.policy_version
    assert len({tuple(o.token_ids) for o in outs[:3]}) > 1  # three draws, not one copied
    scores = engine.score([ps[0]] * 3 + [ps[1]], [o.token_ids for o in outs], weights="policy")
    assert max(_max_diff(o.logprobs, lp) for o, lp in zip(outs, scores.logprobs)) < tol
    again = engine.generate(reqs[:1])
    assert [o.token_ids for o in again] == [o.token_ids for o in outs[:3]]
    # nucleus sampling: each candidate's log-probs are still the convention's full-vocabulary values
    nucleus = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=5, seed=3, n=2)
    outs = engine.generate([GenerationRequest(ps[1], nucleus)])
    scores = engine.score([ps[1]] * 2, [o.token_ids for o in outs], weights="policy")
    assert len(outs) == 2 and max(_max_diff(o.logprobs, lp) for o, lp in zip(outs, scores.logprobs)) < tol
    with pytest.raises(ValueError, match="n "):
        engine.generate([GenerationRequest(ps[0], SamplingParams(n=0))])


def check_failing_stream_callback(engine, tokenizer) -> None:
    """An ``on_token`` callback that raises is the caller's problem: the generation completes, the engine
    keeps serving."""
    p = prompts(tokenizer, 1)[0]
    req = GenerationRequest(p, SamplingParams(max_new_tokens=4, seed=11))

    def broken(index, token):
        raise RuntimeError("stream consumer went away")

    (out,) = engine.generate([req], on_token=broken)
    assert out.token_ids == engine.generate([req])[0].token_ids


class EngineContract:
    """The contract as test methods. A test module that provides an ``engine`` fixture runs all of them with ``class TestXxxContract(EngineContract): pass`` (the base class is not collected)."""

    def test_generate_shapes(self, engine, tiny_tokenizer):
        check_generate_shapes(engine, tiny_tokenizer)

    @pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
    def test_score_reproduces_sampling_logprobs(self, engine, tiny_tokenizer, adapters, temperature):
        engine.publish_adapter(adapters[0], next_version())
        for weights in ("policy", "base"):
            check_score_matches_generate(engine, tiny_tokenizer, temperature, weights=weights, tol=1e-4)

    def test_topk_full_vocab_contains_sampled(self, engine, tiny_tokenizer):
        check_topk_contains_sampled(engine, tiny_tokenizer, k=len(tiny_tokenizer))

    def test_base_vs_policy(self, engine, tiny_tokenizer, adapters):
        check_base_vs_policy(engine, tiny_tokenizer, adapters[1])

    def test_seed_reproducible(self, engine, tiny_tokenizer):
        check_seed_reproducible(engine, tiny_tokenizer)

    def test_finish_length(self, engine, tiny_tokenizer):
        check_finish_length(engine, tiny_tokenizer)

    def test_stop_strings(self, engine, tiny_tokenizer):
        check_stop_strings(engine, tiny_tokenizer)

    def test_concurrent_generate_while_publishing(self, engine, tiny_tokenizer, adapters):
        check_concurrent_publish(engine, tiny_tokenizer, *adapters)

    def test_streaming_callback(self, engine, tiny_tokenizer):
        ps = prompts(tiny_tokenizer, 2)
        seen = {0: [], 1: []}
        outs = engine.generate(
            [GenerationRequest(p, SamplingParams(max_new_tokens=5, seed=i)) for i, p in enumerate(ps)],
            on_token=lambda i, t: seen[i].append(t),
        )
        assert [seen[0], seen[1]] == [o.token_ids for o in outs]

    def test_serving_ahead_of_learning(self, engine, tiny_tokenizer):
        check_serving_ahead_of_learning(engine, tiny_tokenizer)

    def test_invalid_arguments(self, engine, tiny_tokenizer):
        check_invalid_arguments(engine, tiny_tokenizer)

    def test_failing_stream_callback(self, engine, tiny_tokenizer):
        check_failing_stream_callback(engine, tiny_tokenizer)

    def test_n_candidates(self, engine, tiny_tokenizer):
        check_n_candidates(engine, tiny_tokenizer)

    def test_gave_up_work_is_cancelled(self, engine, tiny_tokenizer):
        check_gave_up_work_is_cancelled(engine, tiny_tokenizer)
