"""The offline tiny model: loads with plain transformers, has the roles and added tokens we rely on."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def test_tiny_model_loads_and_runs(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen3"
    assert (
        model.config.hidden_size == 64 and model.config.head_dim == 64 and model.config.num_hidden_layers == 2
    )
    assert model.dtype == torch.float32
    assert 1900 <= len(tok) <= 2100
    ids = tok("hello world", return_tensors="pt").input_ids
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_tiny_tokenizer_chat_template(tiny_tokenizer):
    tok = tiny_tokenizer
    for token in ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>"]:
        ids = tok.encode(token, add_special_tokens=False)
        assert len(ids) == 1, token
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is 2+2?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "add them",
            "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": '{"x": "2+2"}'}}],
        },
        {"role": "tool", "content": "4"},
    ]
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nbe brief\n\n")
    assert '"name": "calc"' in text
    assert "<think>\nadd them\n</think>\n\n<tool_call>\n" in text
    assert "<|im_start|>tool\n<tool_response>\n4\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    # Text round-trips through the byte-level BPE.
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_qwen3_4b_shapes_have_4b_parameters():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from openclaw_trl.testing import qwen3_4b_config_kwargs

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, **qwen3_4b_config_kwargs()))
    assert 4.0e9 <= sum(p.numel() for p in model.parameters()) <= 4.05e9


def test_build_model_dir_saves_the_requested_dtype(tmp_path):
    from openclaw_trl.testing import build_model_dir, build_tiny_tokenizer, tiny_config_kwargs

    path = build_model_dir(tmp_path / "bf16", build_tiny_tokenizer(), tiny_config_kwargs(), dtype="bfloat16")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.dtype == torch.bfloat16
