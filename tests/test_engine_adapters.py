"""One adapter per user on the Transformers engine: K device slots shared LRU by more users, each user's requests
on that user's weights and versions; the slot bookkeeping (``hf_slots``) on its own; the vLLM engines refuse
users' adapters."""

from __future__ import annotations

import threading
import time

import engine_contract as contract
import pytest

from openclaw_trl.engines import GenerationRequest, SamplingParams, create_engine
from openclaw_trl.engines.hf_slots import BASE, SlotTable
from openclaw_trl.engines.views import AdapterView

USERS = ["ann", "bob", "cid", "dan"]
TOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread: the tiny model runs faster so when other processes share the cores."""
    from openclaw_trl.toy.pretrain import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def four_adapters(tiny_model_dir):
    cfg = contract.lora_config()
    return [contract.random_adapter(tiny_model_dir, cfg, seed=20 + i) for i in range(4)]


@pytest.fixture(scope="module")
def pairs(tiny_tokenizer):
    ps = contract.prompts(tiny_tokenizer, 3)
    return ps, [[10, 11, 12, 13], [14, 15], [16, 17, 18]]


@pytest.fixture(scope="module")
def refs(tiny_model_dir, four_adapters, pairs):
    """What a single-adapter engine (no prefix cache) gives for each adapter: scores of ``pairs`` and a greedy
    completion of the first prompt; ``base``: the base weights."""
    ps, comps = pairs
    greedy = GenerationRequest(ps[0], SamplingParams(temperature=0.0, max_new_tokens=6))
    out = {}
    with create_engine(
        "hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config(), prefix_cache_mb=0
    ) as eng:
        out["base"] = (eng.score(ps, comps).logprobs, eng.generate([greedy])[0].token_ids)
        for i, adapter in enumerate(four_adapters):
            eng.publish_adapter(adapter, i + 1)
            out[i] = (eng.score(ps, comps, weights="policy").logprobs, eng.generate([greedy])[0].token_ids)
    assert len({tuple(ids) for _, ids in out.values()}) == 5, "adapters too weak to change the greedy output"
    return out


def _engine(tiny_model_dir, **kwargs):
    # every prompt of these tests goes through the prefix cache: its keys must tell the users' weights apart
    kwargs = {"max_adapters": 2, "prefix_cache_min_tokens": 4, "max_batch_size": 8, **kwargs}
    return create_engine("hf", tiny_model_dir, dtype="float32", lora_config=contract.lora_config(), **kwargs)


def _close(a, b) -> bool:
    return all(len(x) == len(y) and all(abs(u - v) < TOL for u, v in zip(x, y)) for x, y in zip(a, b))


def _check_user(engine, pairs, refs, name, which) -> None:
    """``name``'s policy scores and greedy completion are those of adapter ``which`` (or ``base``)."""
    ps, comps = pairs
    want_scores, want_ids = refs[which]
    assert _close(engine.score(ps, comps, weights="policy", adapter=name).logprobs, want_scores), (
        name,
        which,
    )
    greedy = GenerationRequest(ps[0], SamplingParams(temperature=0.0, max_new_tokens=6), adapter=name)
    out = engine.generate([greedy])[0]
    assert out.token_ids == want_ids, (name, which)
    assert out.policy_version == engine.adapter_version(name)


def test_each_user_gets_its_own_adapter_and_version(tiny_model_dir, four_adapters, pairs, refs):
    with _engine(tiny_model_dir) as eng:
        eng.publish_adapter(four_adapters[0], 7, name="ann")
        eng.publish_adapter(four_adapters[1], 3, name="bob")
        assert (eng.adapter_version("ann"), eng.adapter_version("bob"), eng.adapter_version("cid")) == (
            7,
            3,
            0,
        )
        assert eng.policy_version == eng.adapter_version() == 0  # the unnamed adapter: never published
        for _ in range(2):  # the second round reuses each user's own prefix-cache entries
            _check_user(eng, pairs, refs, "ann", 0)
            _check_user(eng, pairs, refs, "bob", 1)
            _check_user(eng, pairs, refs, "cid", "base")  # no adapter yet: the base weights at version 0
            _check_user(eng, pairs, refs, None, "base")
        assert eng.prefix_cache.stats["hits"] > 0
        ps, comps = pairs
        for name in ("ann", "bob", "cid"):  # ``base`` is the shared base model for everyone
            assert _close(eng.score(ps, comps, weights="base", adapter=name).logprobs, refs["base"][0])
        # base rows of several users share one batch, each tagged with its own user's version
        reqs = [
            GenerationRequest(ps[0], SamplingParams(max_new_tokens=3, seed=1), weights="base", adapter=name)
            for name in ("ann", "bob", "cid")
        ]
        batches = eng.stats["batches"]
        assert [o.policy_version for o in eng.generate(reqs)] == [7, 3, 0]
        assert eng.stats["batches"] == batches + 1
        # policy rows of different users share one too (a mixed batch: each row on its own adapter)
        reqs = [
            GenerationRequest(ps[0], SamplingParams(max_new_tokens=3, seed=1), adapter=name)
            for name in ("ann", "bob")
        ]
        batches = eng.stats["batches"]
        assert [o.policy_version for o in eng.generate(reqs)] == [7, 3]
        assert eng.stats["batches"] == batches + 1
        # the unnamed adapter is one more name next to the users'
        eng.publish_adapter(four_adapters[2], 5)
        assert eng.policy_version == 5 and eng.adapter_version("ann") == 7
        _check_user(eng, pairs, refs, None, 2)
        _check_user(eng, pairs, refs, "ann", 0)


def test_more_users_than_slots_interleaved_and_concurrent(tiny_model_dir, four_adapters, pairs, refs):
    with _engine(tiny_model_dir, batch_wait_s=0.02) as eng:
        for i, name in enumerate(USERS):
            eng.publish_adapter(four_adapters[i], 10 + i, name=name)
        assert eng.model.resident() == []  # a publish for an idle user only updates its CPU copy
        for name in ["ann", "bob", "cid", "ann", "dan", "bob", "dan", "cid"]:
            _check_user(eng, pairs, refs, name, USERS.index(name))
            assert len(eng.model.resident()) <= 2
        refills = eng.model.slot_stats["refills"]
        assert refills >= 6
        errors = []

        def serve(name):
            try:
                for _ in range(2):
                    _check_user(eng, pairs, refs, name, USERS.index(name))
            except BaseException as exc:  # noqa: BLE001
                errors.append((name, exc))

        threads = [threading.Thread(target=serve, args=(name,)) for name in USERS * 2]  # 2 callers per user
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert eng.model.slot_stats["refills"] > refills


def test_lru_eviction_order(tiny_model_dir, four_adapters, pairs):
    ps, comps = pairs
    with _engine(tiny_model_dir) as eng:
        for i, name in enumerate(USERS[:3]):
            eng.publish_adapter(four_adapters[i], 1, name=name)

        def use(name):
            eng.score(ps[:1], comps[:1], weights="policy", adapter=name)
            return eng.model.resident(), eng.model.slot_stats["refills"]

        assert use("ann") == (["ann"], 1)
        assert use("bob") == (["ann", "bob"], 2)
        assert use("ann") == (["bob", "ann"], 2)  # resident: no refill, most recently used now
        assert use("cid") == (["ann", "cid"], 3)  # bob was the least recently used
        assert use("ann") == (["cid", "ann"], 3)
        assert use("bob") == (["ann", "bob"], 4)
        eng.score(ps[:1], comps[:1], weights="base", adapter="cid")  # base work uses no slot
        assert eng.model.resident() == ["ann", "bob"]
        # a publish for a resident user goes to the spare slot and keeps its place
        eng.publish_adapter(four_adapters[3], 2, name="ann")
        assert eng.model.resident() == ["bob", "ann"] and eng.model.slot_stats["refills"] == 4


def test_publish_while_other_work_is_in_flight(tiny_model_dir, four_adapters, pairs, refs):
    """A batch of ann's runs; publishes for bob (idle) and for ann herself return at once (CPU copy; the spare
    slot), the batch finishes on the weights and version it started with, and the next request sees the new."""
    ps, _ = pairs
    with _engine(tiny_model_dir) as eng:
        eng.publish_adapter(four_adapters[0], 1, name="ann")
        req = GenerationRequest(ps[0], SamplingParams(temperature=0.0, max_new_tokens=6), adapter="ann")
        started, release, result = threading.Event(), threading.Event(), {}

        def on_token(_, __):
            started.set()
            release.wait(timeout=30)

        gen = threading.Thread(target=lambda: result.update(out=eng.generate([req], on_token=on_token)[0]))
        gen.start()
        assert started.wait(timeout=30)
        t0 = time.monotonic()
        eng.publish_adapter(four_adapters[1], 1, name="bob")
        eng.publish_adapter(four_adapters[2], 2, name="ann")
        assert time.monotonic() - t0 < 10
        assert eng.adapter_version("ann") == 2
        release.set()
        gen.join(timeout=30)
        assert result["out"].token_ids == refs[0][1] and result["out"].policy_version == 1
        _check_user(eng, pairs, refs, "ann", 2)
        _check_user(eng, pairs, refs, "bob", 1)


def test_invalid_names_and_options(tiny_model_dir, four_adapters, pairs):
    ps, comps = pairs
    with _engine(tiny_model_dir) as eng:
        for bad in ("Ann", "../x", "", "a b", 3, "x" * 33):
            with pytest.raises(ValueError, match="user name"):
                eng.generate([GenerationRequest(ps[0], SamplingParams(max_new_tokens=1), adapter=bad)])
            with pytest.raises(ValueError, match="user name"):
                eng.score(ps, comps, weights="policy", adapter=bad)
            with pytest.raises(ValueError, match="user name"):
                eng.publish_adapter(four_adapters[0], 1, name=bad)
            with pytest.raises(ValueError, match="user name"):
                eng.adapter_version(bad)
        with pytest.raises(ValueError, match="adapter name"):
            AdapterView(eng, None)
        assert eng.model.resident() == [] and eng.adapter_version("ann") == 0
        with pytest.raises(KeyError, match="lacks"):  # a partial adapter would mix with a slot's old weights
            eng.publish_adapter(dict(list(four_adapters[0].items())[:2]), 1, name="ann")
        assert eng.adapter_version("ann") == 0
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="max_adapters"):
            create_engine("hf", tiny_model_dir, max_adapters=bad)


def test_adapter_view_behaves_like_a_single_adapter_engine(tiny_model_dir, tiny_tokenizer, adapters):
    with _engine(tiny_model_dir, max_adapters=1) as eng:
        view, other = AdapterView(eng, "ann"), AdapterView(eng, "bob")
        other.publish_adapter(adapters[0], 99)
        contract.check_generate_shapes(view, tiny_tokenizer)
        contract.check_base_vs_policy(view, tiny_tokenizer, adapters[1])
        for temperature in (1.0, 0.0):
            contract.check_score_matches_generate(view, tiny_tokenizer, temperature)
        contract.check_n_candidates(view, tiny_tokenizer)
        contract.check_concurrent_publish(view, tiny_tokenizer, *adapters, threads=2, rounds=2)
        contract.check_concurrent_publish(other, tiny_tokenizer, *adapters, threads=2, rounds=1)
        assert eng.policy_version == 0 and view.policy_version == eng.adapter_version("ann") > 0


# ---------------------------------------------------------------------- the slot bookkeeping alone
def _table(max_adapters: int, gate: dict | None = None, entered: dict | None = None):
    """A ``SlotTable`` whose fill records ``slot -> weights``; a fill of weights in ``gate`` sets
    ``entered[weights]`` (when given) and then waits on ``gate[weights]``."""
    held: dict[str, object] = {}

    def fill(slot, published):
        if gate and published.weights in gate:
            if entered and published.weights in entered:
                entered[published.weights].set()
            gate[published.weights].wait(timeout=30)
        held[slot] = published.weights

    slots = [f"s{i}" for i in range(max_adapters + 1)]
    return SlotTable(slots, max_adapters, fill), held


def test_slots_keep_pinned_weights_and_versions():
    table, held = _table(1)
    assert table.pin("policy", "a") == (BASE, 0)  # no publish yet: base at version 0
    table.publish("a", "a1", 1)
    slot, version = table.pin("policy", "a")
    assert held[slot] == "a1" and version == 1
    key = table.key_of(slot)
    table.publish("a", "a2", 2)  # the other slot; the pinned one keeps a1
    assert held[slot] == "a1" and table.key_of(slot) == key and table.version("a") == 2
    new, version = table.pin("policy", "a")
    assert new != slot and held[new] == "a2" and version == 2
    table.unpin(new)
    done = threading.Event()
    publisher = threading.Thread(target=lambda: (table.publish("a", "a3", 3), done.set()))
    publisher.start()
    assert not done.wait(0.2), "a publish overwrote a pinned slot"
    table.unpin(slot)
    assert done.wait(10) and held[slot] == "a3"
    assert table.pin("base", "a") == (BASE, 3)


def test_slots_refill_waits_for_a_publishers_copy_never_for_pins():
    """K = 1: a learning task pins b's slot, a publisher is writing b's new weights into the other slot; a
    refill for c waits for that copy (bounded), then takes the slot; with both slots pinned it fails clearly."""
    gate, entered = {"b2": threading.Event()}, {"b2": threading.Event()}
    table, held = _table(1, gate, entered)
    for name in "abc":
        table.publish(name, f"{name}1", 1)
    learning, _ = table.pin("policy", "b")
    publisher = threading.Thread(target=table.publish, args=("b", "b2", 2))
    publisher.start()
    assert entered["b2"].wait(10)  # the publisher holds the other slot, copying
    got = {}
    refill = threading.Thread(target=lambda: got.update(pin=table.pin("policy", "c")))
    refill.start()
    refill.join(0.2)
    assert refill.is_alive() and "pin" not in got  # waits for the copy ...
    gate["b2"].set()
    publisher.join(10)
    refill.join(10)
    slot, version = got["pin"]
    assert slot != learning and held[slot] == "c1" and version == 1 and table.resident() == ["c"]
    assert held[learning] == "b1"
    with pytest.raises(RuntimeError, match="no adapter slot is free"):  # both slots pinned: no hang
        table.pin("policy", "a")
    table.unpin(slot)
    table.unpin(learning)
    slot, version = table.pin("policy", "b")  # evicted by c meanwhile: refilled from its latest CPU copy
    assert held[slot] == "b2" and version == 2


def test_slots_refill_racing_a_publish_keeps_the_newer_weights():
    """A refill of a's v1 still running when a's v2 is published (a not resident): the work runs on v1 and
    says so, a is not mapped to v1, and the next work refills v2."""
    gate, entered = {"a1": threading.Event()}, {"a1": threading.Event()}
    table, held = _table(2, gate, entered)
    table.publish("a", "a1", 1)
    got = {}
    worker = threading.Thread(target=lambda: got.update(pin=table.pin("policy", "a")))
    worker.start()
    assert entered["a1"].wait(10)  # the refill of v1 is copying
    table.publish("a", "a2", 2)  # not resident: CPU copy only, returns at once
    gate["a1"].set()
    worker.join(10)
    slot, version = got["pin"]
    assert held[slot] == "a1" and version == 1 and table.resident() == []
    new, version = table.pin("policy", "a")
    assert held[new] == "a2" and version == 2 and new != slot and table.resident() == ["a"]
    with pytest.raises(ValueError, match="max_adapters"):
        SlotTable(["s0", "s1"], 2, lambda *_: None)
