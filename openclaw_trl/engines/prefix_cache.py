"""A bounded cache of prompt KV states for the Transformers engine: a new prompt reuses its longest cached prefix.

Why: the turns of one conversation share most of their prompt. An agent re-sends its system prompt, its tool
list and the whole history every turn (~10k tokens), so without reuse every turn pays a full prefill of what
the previous turn already computed. With it, a turn computes only the tokens after the longest prefix it
shares with a cached prompt, and the teacher (whose hint is appended to the last user message) computes only
what follows the shared history.

Rules:

* **Weights.** An entry is valid only for the weights it was computed with: its ``key`` names them (``base``,
  or one publish of one user's adapter, whichever slot holds it, see ``SlottedModel.weights_key``). A lookup
  only considers entries of the same key; ``retain`` drops the entries of weights that are no longer served.
* **Exactness.** Attention is causal, so the keys and values of the first ``m`` tokens of a sequence depend
  on those tokens alone: running the rest of a prompt on top of a cached prefix gives the same hidden states
  as running the whole prompt (up to float rounding). A lookup returns at most ``limit`` tokens (the caller
  keeps at least one token to run, whose hidden state it needs).
* **Bounds.** The tensors held are at most ``max_bytes`` (``prefix_cache_mb``); the least recently used entry
  goes first, and a prompt larger than the whole budget is not stored. Prompts shorter than ``min_tokens``
  are neither looked up nor stored (they cost little to recompute and batch better without the cache). An
  entry whose tokens start a newly stored prompt is dropped (the new entry serves every lookup it did), and a
  prompt that starts a cached entry is not stored.
* **Layers.** Only plain growing caches (Transformers' ``DynamicLayer`` in every layer) can be cut at any
  length; a model with sliding-window or recurrent layers runs without the cache (``supported``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_PREFIX_CACHE_MB = 4096
"""Default memory of the prefix cache: ~10k prompt tokens of a 4B model in bfloat16 take ~1.5 GB, so a few
conversations stay cached."""

DEFAULT_PREFIX_CACHE_MIN_TOKENS = 256
"""Shortest prompt that uses the cache."""

Layers = list  # per transformer layer: (keys, values) ``[1, kv_heads, length, head_dim]``, or None (no KV)


@dataclass
class _Entry:
    key: str
    tokens: object  # 1-D long tensor on the CPU (compared with new prompts)
    layers: Layers
    nbytes: int


class PrefixCache:
    """LRU cache of ``(weights key, prompt ids) -> per-layer KV`` bounded by ``max_bytes`` (0 = off).

    Thread-safe. ``stats``: ``lookups``, ``hits``, ``reused_tokens``, ``stored``, ``evicted``.
    """

    def __init__(self, max_bytes: int, min_tokens: int = DEFAULT_PREFIX_CACHE_MIN_TOKENS) -> None:
        if max_bytes < 0 or min_tokens < 1:
            raise ValueError(
                f"prefix cache: max_bytes must be >= 0 and min_tokens >= 1, got {max_bytes}, {min_tokens}"
            )
        self.max_bytes = int(max_bytes)
        self.min_tokens = int(min_tokens)
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # oldest use first
        self._next_id = 0
        self._live: set[str] | None = None  # weights keys still served (None: all)
        self._lock = threading.Lock()
        self.nbytes = 0
        self.stats = dict.fromkeys(("lookups", "hits", "reused_tokens", "stored", "evicted"), 0)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def disable(self) -> None:
        with self._lock:
            self.max_bytes = 0
            self._entries.clear()
            self.nbytes = 0

    def clear(self) -> None:
        """Drop every entry (the bounds and ``stats`` stay): the next prompts are computed in full."""
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def applies(self, ids: list[int]) -> bool:
        """Does a prompt of ``ids`` use the cache (on, and the prompt at least ``min_tokens`` long)?"""
        return self.enabled and len(ids) >= self.min_tokens

    def lookup(self, key: str, ids: list[int], limit: int) -> tuple[int, Layers | None]:
        """``(m, layers)``: the longest prefix of ``ids`` (at most ``limit`` tokens) cached for ``key``, its
        per-layer KV cut to ``m`` tokens; ``(0, None)`` when nothing is shared."""
        import torch

        if not self.applies(ids) or limit <= 0:
            return 0, None
        query = torch.tensor(ids[:limit], dtype=torch.long)
        with self._lock:
            self.stats["lookups"] += 1
            best, best_len = None, 0
            for entry_id, entry in self._entries.items():
                if entry.key != key:
                    continue
                shared = _shared_length(entry.tokens, query)
                if shared > best_len:
                    best, best_len = entry_id, shared
            if best is None:
                return 0, None
            self._entries.move_to_end(best)
            entry = self._entries[best]
            self.stats["hits"] += 1
            self.stats["reused_tokens"] += best_len
            return best_len, cut_layers(entry.layers, best_len)

    def store(self, key: str, ids: list[int], layers: Layers) -> None:
        """Cache the KV of the token sequence ``ids`` (``layers`` hold exactly ``len(ids)`` positions) for
        ``key``. The tensors are kept as they are: nobody may write to them afterwards."""
        import torch

        if not self.applies(ids) or (self._live is not None and key not in self._live):
            return
        nbytes = sum(t.numel() * t.element_size() for pair in layers if pair is not None for t in pair)
        if nbytes > self.max_bytes:
            return
        tokens = torch.tensor(ids, dtype=torch.long)
        with self._lock:
            for entry_id, entry in list(self._entries.items()):
                if entry.key != key:
                    continue
                shared = _shared_length(entry.tokens, tokens)
                if shared == len(tokens):  # a cached prompt starts with this one: it serves the same lookups
                    self._entries.move_to_end(entry_id)
                    return
                if shared == len(entry.tokens):  # this prompt extends a cached one: replace it
                    self._drop(entry_id)
            while self._entries and self.nbytes + nbytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
                self.stats["evicted"] += 1
            self._entries[self._next_id] = _Entry(key, tokens, layers, nbytes)
            self._next_id += 1
            self.nbytes += nbytes
            self.stats["stored"] += 1

    def retain(self, keys: set[str]) -> None:
        """Keep only the entries of the weights ``keys`` (the others are no longer served); later stores
        under other keys are ignored."""
        with self._lock:
            self._live = set(keys)
            for entry_id, entry in list(self._entries.items()):
                if entry.key not in self._live:
                    self._drop(entry_id)

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, entry_id: int) -> None:
        self.nbytes -= self._entries.pop(entry_id).nbytes


def _shared_length(a, b) -> int:
    """Length of the common prefix of two 1-D tensors."""
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if len(differ) else n


def cut_layers(layers: Layers, length: int) -> Layers:
    """The first ``length`` positions of each layer's KV (views)."""
    return [None if pair is None else (pair[0][:, :, :length], pair[1][:, :, :length]) for pair in layers]


def supported(cache) -> bool:
    """Can this model's KV cache (a fresh ``DynamicCache``) be cut at any length and rebuilt from tensors?"""
    from transformers.cache_utils import DynamicLayer

    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


def cache_layers(cache) -> Layers:
    """The per-layer ``(keys, values)`` of a ``DynamicCache`` (None for a layer that holds none)."""
    return [
        (layer.keys, layer.values) if layer.is_initialized and layer.keys.numel() else None
        for layer in cache.layers
    ]


def restored_cache(config, layers: Layers | None):
    """A ``DynamicCache`` for ``config`` holding ``layers`` (no copy: a forward appends by concatenation,
    so the cached tensors are never written to)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for layer, pair in zip(cache.layers, layers or []):
        if pair is not None:
            layer.lazy_initialization(*pair)
            layer.keys, layer.values = pair
    return cache


def left_padded_cache(config, per_prompt: list[Layers], width: int, owner: list[int]):
    """One ``DynamicCache`` for a left-padded batch: prompt ``u``'s KV right-aligned in a row of ``width``
    positions (zeros on the left, which the attention mask hides), row ``b`` holding prompt ``owner[b]``."""
    import torch

    if len(per_prompt) == 1 and owner == [0]:
        return restored_cache(config, per_prompt[0])
    merged: Layers = []
    index = torch.tensor(owner)
    for pairs in zip(*per_prompt):
        if all(pair is None for pair in pairs):
            merged.append(None)
            continue
        out = []
        for side in (0, 1):
            first = next(pair[side] for pair in pairs if pair is not None)
            shape = (len(pairs), first.shape[1], width, first.shape[3])
            full = first.new_zeros(shape)
            for u, pair in enumerate(pairs):
                length = pair[side].shape[2]
                full[u, :, width - length :] = pair[side][0]
            out.append(full[index.to(full.device)])
        merged.append(tuple(out))
    return restored_cache(config, merged)
