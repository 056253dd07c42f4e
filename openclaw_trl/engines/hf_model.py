"""The Transformers engine's model: one frozen causal LM copy with two LoRA slots and the base weights.

Double buffer: the PEFT-wrapped model holds two adapter slots. ``publish`` copies the new weights into the
inactive slot, then the active slot flips. Work pins the slot that was active when it started (``pin`` /
``unpin``), and a publisher waits until the slot it wants to overwrite is no longer pinned. So requests in
flight finish on the weights they started with, and nobody ever sees half-copied weights. ``base`` switches the
adapters off. Every forward holds ``lock`` and selects its weights right before running.
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

from openclaw_trl.engines.adapters import load_adapter_dir
from openclaw_trl.engines.base import Weights

SLOTS = ("slot0", "slot1")
BASE = "base"


class SlottedModel:
    """A frozen causal LM (``AutoModelForCausalLM``) on ``device`` in ``dtype``, with its tokenizer, end ids,
    padding id, and the double-buffered LoRA slots once a ``lora_config`` is known (``wrap``)."""

    def __init__(self, model_path: str, device, dtype, tokenizer=None) -> None:
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
        # Slot bookkeeping (all under _cond): which slot serves `policy`, its version, and pins by running work.
        self._cond = threading.Condition()
        self._active: str | None = None  # None = no adapter yet, `policy` serves the base weights
        self._slot_version = dict.fromkeys(SLOTS, 0)
        self._slot_serial = dict.fromkeys(SLOTS, 0)  # which publish filled each slot (the prefix cache's key)
        self._publishes = 0
        self._pins = dict.fromkeys(SLOTS, 0)
        self.policy_version = 0
        self._publish_lock = threading.Lock()
        self.lock = threading.RLock()
        self._selected: str | None = None  # weights currently switched on in the model (under lock)

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
        """Inject two LoRA slots with ``lora_config`` into the model (done once, under the model lock)."""
        from peft import get_peft_model
        from peft.tuners.tuners_utils import BaseTunerLayer

        with self.lock:
            if self._peft is not None:
                return
            peft_model = get_peft_model(self.lm, lora_config, adapter_name=SLOTS[0])
            peft_model.add_adapter(SLOTS[1], lora_config)
            peft_model.eval()
            peft_model.requires_grad_(False)
            self._peft = peft_model
            self.lm = peft_model.base_model.model
            self._tuner_layers = [m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)]
            named = dict(peft_model.named_parameters())
            for slot in SLOTS:
                # PEFT state dicts drop the adapter name from parameter names; map those keys to this slot.
                self._param_maps[slot] = {
                    name.replace(f".{slot}", ""): param for name, param in named.items() if f".{slot}" in name
                }
            self.lora_config = lora_config
            self._selected = None

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

    def pin(self, weights: Weights) -> tuple[str, int]:
        """Choose the concrete weights for new work and pin its slot so no publish overwrites it."""
        with self._cond:
            slot = self._active if weights == "policy" else None
            if slot is not None:
                self._pins[slot] += 1
            return (slot or BASE), self.policy_version if slot is None else self._slot_version[slot]

    def weights_key(self, selected: str) -> str:
        """A name of the weights ``selected`` holds now, different for every publish into a slot: what KV
        states computed with them are valid for (``prefix_cache``). Stable while ``selected`` is pinned."""
        if selected == BASE:
            return BASE
        with self._cond:
            return f"{selected}#{self._slot_serial[selected]}"

    def served_keys(self) -> set[str]:
        """The ``weights_key`` of the base weights and of the adapter that serves ``policy`` now."""
        with self._cond:
            return {BASE} | ({self.weights_key(self._active)} if self._active is not None else set())

    def unpin(self, selected: str) -> None:
        if selected != BASE:
            with self._cond:
                self._pins[selected] -= 1
                self._cond.notify_all()

    def forward_hidden(self, selected: str, **kwargs):
        """One forward of the transformer body on ``selected`` weights; returns the last hidden states."""
        import torch

        with self.lock, torch.inference_mode():
            self.select(selected)
            return self.body()(**kwargs).last_hidden_state

    def publish(self, adapter, version: int) -> None:
        """Make ``adapter`` the ``policy`` atomically (the double buffer of the class docstring).

        ``adapter`` is a PEFT state dict (``peft.get_peft_model_state_dict``) or a ``save_pretrained`` directory.
        Blocks until the inactive slot is free (at most one batch or score chunk) and the copy is done.
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
            with self._cond:
                target = SLOTS[1] if self._active == SLOTS[0] else SLOTS[0]
                while self._pins[target] > 0:
                    self._cond.wait()
            self._copy_into(target, state_dict)
            with self._cond:
                self._publishes += 1
                self._slot_serial[target] = self._publishes
                self._slot_version[target] = int(version)
                self._active = target
                self.policy_version = int(version)

    def _copy_into(self, slot: str, state_dict: dict) -> None:
        """Copy a PEFT state dict into the parameters of ``slot`` (checking every key and shape)."""
        import torch

        params = self._param_maps[slot]
        missing = []
        with torch.no_grad():
            for key, value in state_dict.items():
                param = params.get(key) if key in params else params.get("base_model.model." + key)
                if param is None:
                    missing.append(key)
                    continue
                if param.shape != value.shape:
                    raise ValueError(
                        f"adapter tensor {key}: shape {tuple(value.shape)} != {tuple(param.shape)}"
                    )
                param.copy_(value.to(device=param.device, dtype=param.dtype))
        if missing:
            raise KeyError(f"adapter keys not in the engine's LoRA layout: {missing[:5]} …")
