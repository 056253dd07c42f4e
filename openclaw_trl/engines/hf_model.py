"""The Transformers engine's model: one frozen causal LM copy with ``K + 1`` LoRA slots and the base weights.

Each user's adapter (or the run's only adapter, name ``None``) is kept on the CPU as the authoritative copy of
its latest publish; up to ``K = max_adapters`` of them are resident in the slots, one more slot serving as the
double buffer. Which slot holds what, who may overwrite it and when, is ``hf_slots.SlotTable`` (its docstring
states the rules: work in flight finishes on the weights it started with, nobody sees half-copied weights,
the worker thread never deadlocks). This module owns the tensors: it injects the slots (``wrap``), takes the
CPU snapshot of a published state dict and copies snapshots into slots. ``base`` switches the adapters off.
Every forward holds ``lock`` and selects its weights right before running.

Mixed batches. ``forward_hidden`` also takes one selection per batch row (slots and ``BASE`` mixed): the base
projections run once for the whole batch and each row gets its own slot's LoRA delta (``hf_mixed``: the math,
and which LoRA setups qualify, ``mixable``).
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import load_adapter_dir
from openclaw_trl.engines.base import Weights
from openclaw_trl.engines.hf_mixed import MixedLora, supported
from openclaw_trl.engines.hf_slots import BASE, Published, SlotTable

SLOT_PREFIX = "slot"


class SlottedModel:
    """A frozen causal LM (``AutoModelForCausalLM``) on ``device`` in ``dtype``, with its tokenizer, end ids,
    padding id, and ``max_adapters + 1`` LoRA slots once a ``lora_config`` is known (``wrap``)."""

    def __init__(self, model_path: str, device, dtype, tokenizer=None, max_adapters: int = 1) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
        model.to(device).eval()
        model.requires_grad_(False)
        self.lm = model  # the causal LM (with LoRA layers injected in place once wrapped)
        self._peft = None
        self._tuner_layers: list = []
        self._param_maps: dict[str, dict[str, Any]] = {}
        self.lora_config = None
        self.eos_ids = self._eos_ids()
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (sorted(self.eos_ids)[0] if self.eos_ids else 0)
        forward_args = inspect.signature(self.body().forward).parameters
        self.cache_kw = "cache" if "cache" in forward_args else "past_key_values"
        self.max_adapters = max_adapters
        self._slots: SlotTable | None = None  # once wrapped
        self._device = device
        self._pin_memory = str(device).startswith("cuda")  # CPU copies in pinned memory: fast uploads
        self._publish_lock = threading.Lock()
        self.lock = threading.RLock()
        self._selected: str | None = None  # weights currently switched on in the model (under lock)
        self._mixer: MixedLora | None = None  # once wrapped, when the LoRA setup can be mixed
        self.mixable = True  # rows of different weights may share a forward (decided at ``wrap``)

    @property
    def vocab_size(self) -> int:
        return self.lm.get_output_embeddings().weight.shape[0]

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        eos = getattr(self.lm.generation_config, "eos_token_id", None)
        for value in [eos, self.tokenizer.eos_token_id]:
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    def body(self):
        """The transformer stack without the LM head (hidden states in, so we can pick positions first)."""
        return self.lm.get_decoder()

    def logits(self, hidden):
        """LM head on selected hidden states, plus the output scalings some architectures apply."""
        logits = self.lm.get_output_embeddings()(hidden)
        cfg = self.lm.config
        scale = getattr(cfg, "logit_scale", None)
        if isinstance(scale, (int, float)) and scale != 1:
            logits = logits * scale
        cap = getattr(cfg, "final_logit_softcapping", None)
        if cap:
            logits = (logits / cap).tanh() * cap
        return logits.float()

    def wrap(self, lora_config) -> None:
        """Inject ``max_adapters + 1`` LoRA slots with ``lora_config`` into the model (once, under the model lock)."""
        from peft import get_peft_model
        from peft.tuners.tuners_utils import BaseTunerLayer

        with self.lock:
            if self._peft is not None:
                return
            slots = [f"{SLOT_PREFIX}{i}" for i in range(self.max_adapters + 1)]
            peft_model = get_peft_model(self.lm, lora_config, adapter_name=slots[0])
            for slot in slots[1:]:
                peft_model.add_adapter(slot, lora_config)
            peft_model.eval()
            peft_model.requires_grad_(False)
            self._peft = peft_model
            self.lm = peft_model.base_model.model
            self._tuner_layers = [m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)]
            self.mixable = supported(peft_model, self._tuner_layers, slots)
            if self.mixable:
                self._mixer = MixedLora(self._tuner_layers, slots)
            named = dict(peft_model.named_parameters())
            for slot in slots:
                # PEFT state dicts drop the adapter name from parameter names; map those keys to this slot.
                self._param_maps[slot] = {
                    name.replace(f".{slot}.", "."): param
                    for name, param in named.items()
                    if f".{slot}." in name
                }
            self.lora_config = lora_config
            self._selected = None
            self._slots = SlotTable(slots, self.max_adapters, self._fill)

    def select(self, weights: str) -> None:
        """Switch the model to ``weights`` (``base`` or a slot). Caller holds the model lock."""
        if weights == self._selected:
            return
        for layer in self._tuner_layers:
            if weights == BASE:
                layer.enable_adapters(False)
            else:
                layer.enable_adapters(True)
                layer.set_adapter(weights)
        self._selected = weights

    def pin(
        self, weights: Weights, name: str | None = None, spare: int | None = None
    ) -> tuple[str, int] | None:
        """Choose the concrete weights for new work on ``weights`` of adapter ``name`` and pin its slot so no
        publish or refill overwrites it: ``(selected, version)``, or ``None`` when a ``spare`` pin is refused
        (``hf_slots.SlotTable.pin``)."""
        if self._slots is None:
            return BASE, 0
        return self._slots.pin(weights, name, spare)

    def unpin(self, selected: str) -> None:
        if self._slots is not None:
            self._slots.unpin(selected)

    def adapter_version(self, name: str | None = None) -> int:
        """The version of ``name``'s latest publish (0 before its first)."""
        return 0 if self._slots is None else self._slots.version(name)

    @property
    def policy_version(self) -> int:
        return self.adapter_version(None)

    def resident(self) -> list[str | None]:
        """The adapters whose weights are on the device now, least recently used first."""
        return [] if self._slots is None else self._slots.resident()

    @property
    def slot_stats(self) -> dict:
        """Refills (and their seconds), publish copies and evictions so far (``hf_slots.SlotTable.stats``)."""
        return {} if self._slots is None else dict(self._slots.stats)

    def weights_key(self, selected: str) -> str:
        """A name of the weights ``selected`` holds now, one per publish (a refill of the same publish keeps it):
        what KV states computed with them are valid for (``prefix_cache``). Stable while ``selected`` is pinned."""
        return BASE if self._slots is None else self._slots.key_of(selected)

    def adapter_copies(self) -> tuple[int, int]:
        """The adapters published, and the bytes of their authoritative CPU copies (``hf_slots``)."""
        return (0, 0) if self._slots is None else self._slots.copy_bytes()

    def served_keys(self) -> set[str]:
        """The ``weights_key`` of the base weights and of every adapter's latest publish."""
        return {BASE} | (set() if self._slots is None else self._slots.latest_keys())

    def forward_hidden(self, selected: str | list[str], **kwargs):
        """One forward of the transformer body on ``selected`` weights (one selection for the whole batch, or
        one per batch row: a mixed batch, module docstring); returns the last hidden states."""
        import torch

        rows = None
        if not isinstance(selected, str):
            distinct = set(selected)
            if not distinct:
                raise ValueError("forward_hidden needs one selection per batch row, got none")
            if len(distinct) == 1:
                selected = next(iter(distinct))
            else:
                if not self.mixable:
                    raise ValueError(
                        "this LoRA configuration cannot mix adapters in one batch (only plain LoRA Linear layers "
                        "without DoRA, variants, bias or modules_to_save can, see hf_mixed)"
                    )
                rows = [None if s == BASE else s for s in selected]
                selected = BASE  # the base projections, once; each row's delta is added (``hf_mixed``)
        with self.lock, torch.inference_mode():
            self.select(selected)
            if rows is None:
                return self.body()(**kwargs).last_hidden_state
            self._mixer.begin(rows)  # type: ignore[union-attr]
            try:
                return self.body()(**kwargs).last_hidden_state
            finally:
                self._mixer.end()  # type: ignore[union-attr]

    def publish(self, adapter, version: int, name: str | None = None) -> None:
        """Make ``adapter`` the ``policy`` of ``name`` atomically (``hf_slots``: the new weights are kept on the
        CPU and, when ``name`` is resident, copied into a free slot before its mapping switches).

        ``adapter`` is a PEFT state dict (``peft.get_peft_model_state_dict``) or a ``save_pretrained`` directory.
        Blocks until the copy is done (waiting, at most, for the work pinned on the slot it needs).
        """
        config = None
        if isinstance(adapter, (str, Path)):
            state_dict, config = load_adapter_dir(adapter)
        else:
            state_dict = adapter
        with self._publish_lock:
            if self._peft is None:
                if self.lora_config is None and config is None:
                    raise ValueError(
                        "HFEngine has no LoraConfig: pass lora_config= to the constructor or publish an adapter "
                        "directory that contains adapter_config.json"
                    )
                self.wrap(self.lora_config or config)
            self._slots.publish(name, self._snapshot(state_dict), version)  # type: ignore[union-attr]

    def _snapshot(self, state_dict: dict) -> dict:
        """The authoritative CPU copy of a PEFT state dict: every slot parameter's tensor by its slot-free name,
        in the slot's dtype, cloned (the caller may keep training the tensors it passed), in pinned memory when
        the slots are on CUDA. Every key and shape is checked, and every slot parameter must be given."""
        import torch

        params = self._param_maps[SLOT_PREFIX + "0"]
        out, missing = {}, []
        for key, value in state_dict.items():
            name = key if key in params else "base_model.model." + key
            param = params.get(name)
            if param is None:
                missing.append(key)
                continue
            if param.shape != value.shape:
                raise ValueError(f"adapter tensor {key}: shape {tuple(value.shape)} != {tuple(param.shape)}")
            cpu = torch.empty(param.shape, dtype=param.dtype, pin_memory=self._pin_memory)
            cpu.copy_(value.detach())
            if not torch.isfinite(cpu).all():  # a mixed batch multiplies every slot's weights (``hf_mixed``)
                raise ValueError(f"adapter tensor {key} has non-finite values (inf or NaN)")
            out[name] = cpu
        if missing:
            raise KeyError(f"adapter keys not in the engine's LoRA layout: {missing[:5]} …")
        absent = sorted(set(params) - set(out))
        if absent:
            raise KeyError(f"adapter lacks {len(absent)} tensors of the engine's LoRA layout: {absent[:3]} …")
        return out

    def _fill(self, slot: str, published: Published) -> None:
        """Copy a publish's CPU weights into the parameters of ``slot`` (``hf_slots``' fill callback)."""
        import torch

        params = self._param_maps[slot]
        with torch.no_grad():
            for name, value in published.weights.items():
                params[name].copy_(value, non_blocking=self._pin_memory)
        if self._pin_memory:
            torch.cuda.current_stream(self._device).synchronize()
        if self._mixer is not None:
            self._mixer.changed()
