"""Mixed-adapter batches on the Transformers engine: rows of several users' adapters and ``base`` rows decoded in
one batch give each row what it gets alone; slots are pinned per row and released; more adapters than free slots
wait for the next batch; the slot bookkeeping's ``spare`` pins; the fallback without mixing."""

from __future__ import annotations

import engine_contract as contract
import pytest

from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine
from openclaw_trl.engines.hf_slots import BASE, SlotTable

USERS = ["ann", "bob", "cid"]
TOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    from openclaw_trl.toy.pretrain import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def three_adapters(tiny_model_dir):
    cfg = contract.lora_config()
    return [contract.random_adapter(tiny_model_dir, cfg, seed=40 + i) for i in range(3)]


def _engine(tiny_model_dir, adapters, **kwargs):
    kwargs = {"max_adapters": 3, "max_batch_size": 8, **kwargs}
    eng = create_engine("hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config(), **kwargs)
    for i, (name, adapter) in enumerate(zip(USERS, adapters)):
        eng.publish_adapter(adapter, 10 + i, name=name)
    return eng


def _requests(tiny_tokenizer, greedy: bool) -> list[GenerationRequest]:
    """3 users' policy rows and a base row; ann and bob share a prompt (their prefills must not be shared)."""
    a, b, c = contract.prompts(tiny_tokenizer, 3)

    def sp(seed):
        return SamplingParams(temperature=0.0 if greedy else 0.9, max_new_tokens=6, seed=seed)

    return [
        GenerationRequest(a, sp(1), adapter="ann"),
        GenerationRequest(a, sp(2), adapter="bob"),
        GenerationRequest(b, sp(3), adapter="cid"),
        GenerationRequest(c, sp(4), weights="base", adapter="ann"),
    ]


def _same(together, alone) -> None:
    for x, y in zip(together, alone):
        assert x.token_ids == y.token_ids
        assert max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) < TOL
        assert x.policy_version == y.policy_version


@pytest.mark.parametrize("prefix_cache_mb", [0, 64])
@pytest.mark.parametrize("greedy", [True, False])
def test_mixed_batch_gives_each_row_what_it_gets_alone(
    tiny_model_dir, tiny_tokenizer, three_adapters, prefix_cache_mb, greedy
):
    reqs = _requests(tiny_tokenizer, greedy)
    kwargs = {"prefix_cache_mb": prefix_cache_mb, "prefix_cache_min_tokens": 4}
    with _engine(tiny_model_dir, three_adapters, mix_adapters=False, **kwargs) as eng:
        alone = [eng.generate([r])[0] for r in reqs]
        assert eng.stats["mixed_batches"] == 0
    assert len({tuple(o.token_ids) for o in alone[:2]}) == 2 or not greedy  # the adapters change the output
    assert [o.policy_version for o in alone] == [10, 11, 12, 10]
    with _engine(tiny_model_dir, three_adapters, **kwargs) as eng:
        for _ in range(2):  # the second round: each row's prompt KV comes from its own weights' cache entries
            batches = eng.stats["batches"]
            together = eng.generate(reqs)
            assert eng.stats["batches"] == batches + 1
            _same(together, alone)
        assert eng.stats["mixed_batches"] == 2
        if prefix_cache_mb:
            assert eng.prefix_cache.stats["hits"] > 0
        # every pin was released: publishes for resident users find a free slot at once
        for i, name in enumerate(USERS):
            eng.publish_adapter(three_adapters[(i + 1) % 3], 20 + i, name=name)
        assert [eng.adapter_version(n) for n in USERS] == [20, 21, 22]


def test_more_adapters_than_free_slots_wait_for_the_next_batch(
    tiny_model_dir, tiny_tokenizer, three_adapters
):
    """One slot resident (2 in all) for 3 users: a batch takes what the slots hold, the other rows run next."""
    reqs = _requests(tiny_tokenizer, greedy=True)
    with _engine(tiny_model_dir, three_adapters, mix_adapters=False) as eng:
        alone = [eng.generate([r])[0] for r in reqs]
    with _engine(tiny_model_dir, three_adapters, max_adapters=1) as eng:
        together = eng.generate(reqs)
        _same(together, alone)
        assert eng.stats["deferred_rows"] >= 1 and eng.stats["batches"] >= 2
        assert len(eng.model.resident()) == 1


def test_without_mixing_each_adapter_gets_its_own_batch(tiny_model_dir, tiny_tokenizer, three_adapters):
    reqs = _requests(tiny_tokenizer, greedy=True)
    with _engine(tiny_model_dir, three_adapters, mix_adapters=False) as eng:
        eng.generate(reqs)
        assert eng.stats["batches"] == 4 and eng.stats["mixed_batches"] == 0
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="mix_adapters"):
            create_engine("hf", tiny_model_dir, mix_adapters=bad)


def test_a_lora_setup_peft_cannot_mix_falls_back(tiny_model_dir, tiny_tokenizer):
    """DoRA: PEFT refuses mixed batches, so the engine decodes one batch per weights."""
    from peft import LoraConfig

    dora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], use_dora=True)
    with create_engine("hf", tiny_model_dir, dtype="float32", lora_config=dora) as eng:
        assert eng.model.mixable is False and eng._mixing is False
        with pytest.raises(ValueError, match="cannot mix"):
            eng.model.forward_hidden(["slot0", BASE], input_ids=None)
    with create_engine("hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config()) as eng:
        assert eng.model.mixable is True
        with pytest.raises(ValueError, match="one selection per batch row"):
            eng.model.forward_hidden([], input_ids=None)


# ---------------------------------------------------------------------- the slot bookkeeping alone
def _table(max_adapters: int):
    held: dict[str, object] = {}
    slots = [f"s{i}" for i in range(max_adapters + 1)]
    return SlotTable(
        slots, max_adapters, lambda slot, published: held.update({slot: published.weights})
    ), held


def test_spare_pins_never_wait_and_keep_slots_free():
    table, held = _table(2)  # 3 slots
    for name in "abcd":
        table.publish(name, name + "1", 1)
    first, _ = table.pin("policy", "a")  # a batch's first adapter: refilled unconditionally
    assert held[first] == "a1"
    assert table.pin("policy", "b", spare=2) is None  # would leave only 1 other slot usable
    second, _ = table.pin("policy", "b", spare=1)
    assert held[second] == "b1" and second != first
    assert table.pin("policy", "c", spare=1) is None  # the last slot stays for another task's first adapter
    third, _ = table.pin("policy", "c", spare=0)
    assert len({first, second, third}) == 3
    assert table.pin("policy", "d", spare=0) is None  # every slot pinned: refused at once, no wait, no error
    assert table.pin("policy", "b", spare=5) == (second, 1)  # already pinned: pinning again uses no slot
    assert table.pin("base", "d", spare=5) == (BASE, 1)  # base work never needs a slot
    for slot in (first, second, third, second):
        table.unpin(slot)
    # resident and unpinned: a spare pin of it must leave enough other slots usable
    assert table.pin("policy", "c", spare=2) == (third, 1)
    table.unpin(third)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="spare"):
            table.pin("policy", "a", spare=bad)


def test_refused_adapters_and_setups_that_cannot_mix(tiny_model_dir, three_adapters):
    """A non-finite tensor would poison the other rows of a mixed batch (``0 * inf``): refused at publish. A LoRA
    bias is not mixed (the engine then decodes one batch per weights)."""
    import math

    from peft import LoraConfig

    with _engine(tiny_model_dir, three_adapters) as eng:
        for bad in (math.inf, math.nan):
            broken = {k: v.clone() for k, v in three_adapters[0].items()}
            next(iter(broken.values())).view(-1)[0] = bad
            with pytest.raises(ValueError, match="non-finite"):
                eng.publish_adapter(broken, 99, name="ann")
        assert eng.adapter_version("ann") == 10
    biased = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_bias=True)
    with create_engine("hf", tiny_model_dir, dtype="float32", lora_config=biased) as eng:
        assert eng.model.mixable is False
