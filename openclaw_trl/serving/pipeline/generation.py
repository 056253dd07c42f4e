"""The second step of a chat turn: the engine samples the reply (``ChatGenerator.generate`` -> ``Generation``).

``generate`` runs on a generation thread (``ChatService.executor``); everything it learns (the completion, its
text, a Best-of-N group) comes back in the returned ``Generation``, never through a shared object, so the
thread that records the turn reads only what was handed to it.

Best-of-N (a ``best_of_n`` with ``n > 1``, see ``openclaw_trl.judging.best_of_n``): a trainable turn samples
``n`` candidates in one engine call, each is decoded as its reply would be and quick-judged, and the best is
the turn: it is streamed only once chosen (its tokens go out one by one then), so the first token of a
streamed reply waits for all ``n`` generations and the quick judging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openclaw_trl.engines.base import Completion, GenerationRequest
from openclaw_trl.serving.pipeline.prepare import PreparedChat
from openclaw_trl.serving.pipeline.streaming import StopTrimmer, StreamDecoder


@dataclass(frozen=True)
class CandidateSet:
    """A Best-of-N turn's candidates, their decoded texts and the quick judge's choice."""

    completions: list[Completion]
    texts: list[str]  # each candidate's decoded completion (special tokens kept)
    choice: Any  # ``judging.best_of_n.GroupChoice``


@dataclass(frozen=True)
class Generation:
    """What the engine produced for one turn: the served completion (ids, sampling log-probs, finish reason,
    policy version), its text decoded with special tokens kept (what the store keeps), and with Best-of-N the
    candidate set it was chosen from."""

    completion: Completion
    text: str
    group: CandidateSet | None = None

    @property
    def token_ids(self) -> list[int]:
        return list(self.completion.token_ids)

    @property
    def finish_reason(self) -> str:
        return self.completion.finish_reason

    @property
    def policy_version(self) -> int:
        return self.completion.policy_version


class ChatGenerator:
    """Engine calls for prepared turns, and how their tokens read as an assistant message."""

    def __init__(self, engine, tokenizer, best_of_n=None):
        self.engine, self.tokenizer, self.best_of_n = engine, tokenizer, best_of_n

    def generate(self, prep: PreparedChat, on_token: Callable[[int], None] | None = None) -> Generation:
        """Blocking: one request through the engine (the engine batches concurrent callers); with Best-of-N
        the chosen candidate (``_best_of_n``). ``on_token(token_id)`` is called as the served reply's tokens
        are known."""
        if prep.candidates > 1:
            return self._best_of_n(prep, on_token)
        request = GenerationRequest(prompt_ids=prep.prompt_ids, sampling=prep.sampling, weights="policy")
        callback = (lambda _index, token_id: on_token(token_id)) if on_token else None
        completion = self.engine.generate([request], on_token=callback)[0]
        return Generation(completion, self._text(completion))

    def _best_of_n(self, prep: PreparedChat, on_token: Callable[[int], None] | None) -> Generation:
        """``prep.candidates`` samples in one engine call, quick-judged; the chosen one is streamed (its
        tokens through ``on_token``) and returned with the whole set."""
        sampling = dataclasses.replace(prep.sampling, n=prep.candidates)
        request = GenerationRequest(prompt_ids=prep.prompt_ids, sampling=sampling, weights="policy")
        completions = self.engine.generate([request])
        replies = [self.decoded_message(prep, c) for c in completions]
        session = prep.ctx.session_key or f"anonymous-{prep.ctx.session_id}"
        choice = self.best_of_n.choose(
            prep.messages,
            session,
            replies,
            completions,
            prep.sampling.temperature,
            prep.tools,
            seed=prep.sampling.seed,
        )
        texts = [self._text(c) for c in completions]
        chosen = completions[choice.served_index]
        for token_id in chosen.token_ids if on_token else ():
            on_token(token_id)
        return Generation(chosen, texts[choice.served_index], CandidateSet(completions, texts, choice))

    def _text(self, completion: Completion) -> str:
        return self.tokenizer.decode(list(completion.token_ids), skip_special_tokens=False)

    def decoded_message(self, prep: PreparedChat, completion: Completion) -> dict:
        """The assistant message of a completion as a non-streamed reply carries it (stop text cut)."""
        from openclaw_trl.chat import decode_completion

        decoded = decode_completion(self.tokenizer, completion.token_ids)
        if prep.sampling.stop and decoded.get("content"):
            decoded["content"] = StopTrimmer(prep.sampling.stop).feed(decoded["content"], final=True)
        return as_message(decoded)

    def stream_parser(self, prep: PreparedChat) -> StreamDecoder:
        """A fresh decoder of this turn's tokens into stream deltas."""
        return StreamDecoder(
            self.tokenizer, prep.sampling.stop, start_in_reasoning=self._prompt_opens_think(prep)
        )

    def _prompt_opens_think(self, prep: PreparedChat) -> bool:
        """Qwen3-style templates may open ``<think>`` in the generation prompt: the stream starts in reasoning."""
        tail = self.tokenizer.decode(prep.prompt_ids[-8:], skip_special_tokens=False).rstrip()
        return tail.endswith("<think>")


def as_message(parsed) -> dict:
    """``decode_completion``'s result (dict or object) -> an assistant message in the internal chat format."""
    get = parsed.get if isinstance(parsed, dict) else lambda k, d=None: getattr(parsed, k, d)
    content = get("content")
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or get("tool_calls") else content or "",
    }
    if get("reasoning_content"):
        msg["reasoning_content"] = get("reasoning_content")
    if get("tool_calls"):
        msg["tool_calls"] = list(get("tool_calls"))
    return msg
