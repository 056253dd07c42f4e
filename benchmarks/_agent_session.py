"""An OpenClaw-shaped agent session, made up: a long system prompt in sections, function tools with long
descriptions, and turns whose last user message holds an internal-context block the next request drops."""

from __future__ import annotations

import random

WORDS = (
    "the agent must always read the file before it writes and keep the user informed about every step it takes "
    "when a tool call fails report the error and try again with a smaller change never run commands that delete "
    "data without asking first workspace repository session memory heartbeat compaction skills browser terminal "
    "execute command permission sandbox context bootstrap channel message assistant instructions"
).split()


def text(chars: int, rng: random.Random) -> str:
    """Prose of about ``chars`` characters in sections, as an agent's system prompt reads."""
    out, n = [], 0
    while n < chars:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "."
        if rng.random() < 0.1:
            line = f"\n## Section {len(out)}\n{line}"
        out.append(line)
        n += len(line) + 1
    return " ".join(out)[:chars]


def tools(rng: random.Random, count: int = 12, chars: int = 500) -> list[dict]:
    """``count`` function tools (read, write, exec, browser, ...) with ``chars``-character descriptions (12 x 500:
    ~12 KB of JSON, the agent's ~10 KB)."""
    names = ["read", "write", "edit", "exec", "process", "browser", "web_search", "web_fetch", "memory_search",
             "memory_get", "sessions_send", "message"]  # fmt: skip
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": text(chars, rng),
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"arg_{k}": {"type": "string", "description": text(chars // 8, rng)} for k in range(3)
                    },
                    "required": ["arg_0"],
                },
            },
        }
        for name in names[:count]
    ]


def session(size: dict, turns: int = 3, seed: int = 0) -> tuple[list[list[dict]], list[dict]]:
    """The message lists of the session's requests and its tools."""
    rng = random.Random(seed)
    system = {"role": "system", "content": text(size["system_chars"], rng)}
    user, block, reply = (int(n * size["turn_scale"]) for n in (300, 200, 400))
    history, requests = [system], []
    for t in range(turns):
        history = history + [{"role": "user", "content": f"Turn {t}: {text(user, rng)}"}]
        context = f"<<<BEGIN_INTERNAL_CONTEXT>>>\n{text(block, rng)}\n<<<END_INTERNAL_CONTEXT>>>"
        requests.append(history + [{"role": "user", "content": context}])  # dropped by the next request
        history = history + [{"role": "assistant", "content": text(reply, rng)}]
    return requests, tools(rng, size["tools"], size["tool_chars"])
