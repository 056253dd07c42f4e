"""VLLMEngine without LoRA (full fine-tuning): weights are pushed in place and ``base`` is the policy."""

from __future__ import annotations

import engine_contract as contract
import pytest
from test_vllm_engine import HAVE_VLLM

from openclaw_trl.engines import GenerationRequest, create_engine

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable here")]


@pytest.fixture(scope="module")
def perturbed(tiny_model_dir, tmp_path_factory):
    """The tiny model with noise on every weight: its state dict and a saved copy for the HF reference."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    path = tmp_path_factory.mktemp("perturbed")
    model.save_pretrained(path)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(path)
    return {k: v.clone() for k, v in model.state_dict().items()}, path


def test_full_weight_push(tiny_model_dir, tiny_tokenizer, perturbed):
    state_dict, ref_dir = perturbed
    eng = create_engine("vllm", tiny_model_dir, enable_lora=False, max_model_len=512)
    hf = create_engine("hf", ref_dir, dtype="float32")
    try:
        ps = contract.prompts(tiny_tokenizer, 2)
        comps = [[10, 11, 12, 13], [14, 15]]
        before = eng.score(ps, comps, weights="base").logprobs
        eng.publish_adapter(state_dict, 7)
        assert eng.policy_version == 7
        base = eng.score(ps, comps, weights="base").logprobs
        policy = eng.score(ps, comps, weights="policy").logprobs
        assert base == policy  # one set of weights: base is the policy
        assert max(abs(a - b) for x, y in zip(before, base) for a, b in zip(x, y)) > 1e-3
        ref = hf.score(ps, comps).logprobs
        assert max(abs(a - b) for x, y in zip(ref, base) for a, b in zip(x, y)) < 1e-4
        with pytest.raises(ValueError, match="max_logprobs=-1"):
            eng.score(ps, comps, temperature=0.7)  # capped max_logprobs: no silent raw (T=1) values
        # one set of weights for the run: no per-user adapters
        with pytest.raises(ValueError, match="no per-user adapters"):
            eng.publish_adapter(state_dict, 8, name="alice")
        with pytest.raises(ValueError, match="no per-user adapters"):
            eng.score(ps, comps, adapter="alice")
        with pytest.raises(ValueError, match="no per-user adapters"):
            eng.generate([GenerationRequest(ps[0], adapter="alice")])
        assert eng.policy_version == 7
    finally:
        eng.close()
        hf.close()
