"""Mixed-adapter forwards for the Transformers engine: each batch row gets its own LoRA slot's delta.

The math. A LoRA layer on slot ``s`` computes ``y = W x + scaling_s * B_s A_s x`` (eval mode: no dropout). For a
batch whose rows use different slots (or none: the base weights), ``W x`` is computed once for the whole batch
(the layer's base projection, its adapters switched off), then every row gets its own delta from all slots at
once, in two matrix products whatever the number of adapters:

    h = x A_all^T            A_all = [A_0; A_1; ...; A_S-1]      (S r_total x in, the slots' A stacked)
    h = h * c_row            c_row = scaling_s on the columns of the row's slot s, 0 elsewhere (all 0: base)
    delta = h B_all^T        B_all = [B_0, B_1, ..., B_S-1]      (out x S r_total, the slots' B side by side)

so row ``b`` gets ``scaling_s B_s A_s x_b``: the same sum as a forward on slot ``s`` alone, up to float rounding.
It costs the LoRA products of every slot for every row (small next to ``W x`` at LoRA ranks) but only a few
tensor operations per layer, where splitting the batch per adapter (PEFT's ``adapter_names`` forward) costs a
gather, two products and a scatter per adapter per layer: the per-operation overhead that dominates small
decode steps. The stacked matrices are copies of the slots' weights, rebuilt on the first mixed forward after a
slot was written (``changed``). Slots no row uses contribute exact zeros only because their weights are finite
(``0 * inf`` is NaN): publishes refuse non-finite tensors (``hf_model``).

Supported: plain ``peft`` LoRA ``Linear`` layers only (no DoRA or other variant, no LoRA bias, no merged
weights, eval mode); ``supported`` says whether a wrapped model qualifies.
"""

from __future__ import annotations

from typing import Any


def supported(peft_model, tuner_layers: list, slots: list[str]) -> bool:
    """Whether every tuner layer is a plain LoRA ``Linear`` this module can mix (module docstring)."""
    from peft.tuners.lora import layer as lora
    from peft.utils.other import AuxiliaryTrainingWrapper

    if peft_model.training or not tuner_layers:
        return False
    if any(isinstance(m, AuxiliaryTrainingWrapper) for m in peft_model.modules()):
        return False
    for layer in tuner_layers:
        if type(layer) is not lora.Linear or layer.lora_variant or layer.merged_adapters:
            return False
        for slot in slots:
            if slot not in layer.lora_A or layer.lora_B[slot].bias is not None:
                return False
    return True


class MixedLora:
    """The stacked slot weights of every LoRA ``Linear`` layer and a forward hook that adds each row's delta
    while a mixed forward runs (``begin`` / ``end``, called under the model lock)."""

    def __init__(self, layers: list, slots: list[str]) -> None:
        import torch

        self.layers = layers
        self.slots = list(slots)
        self._version = 0  # bumped after every slot write
        self._built = -1  # the version the stacks were built for
        self._stacks: dict[int, tuple[Any, Any, int]] = {}  # id(layer) -> (A_all, B_all, pattern index)
        self._patterns: list = []  # per distinct (ranks, scalings): [S + 1, r_total] row coefficients
        self._coef: list | None = None  # per pattern, while mixing: [B, 1, r_total]
        seen: dict[tuple, int] = {}
        for layer in layers:
            ranks = tuple(layer.r[s] for s in self.slots)
            scalings = tuple(float(layer.scaling[s]) for s in self.slots)
            key = (ranks, scalings)
            if key not in seen:
                weight = layer.lora_A[self.slots[0]].weight
                table = torch.zeros(
                    (len(self.slots) + 1, sum(ranks)), dtype=weight.dtype, device=weight.device
                )
                start = 0
                for i, (r, scale) in enumerate(zip(ranks, scalings)):
                    table[i, start : start + r] = scale
                    start += r
                seen[key] = len(self._patterns)
                self._patterns.append(table)  # the last row (all zeros) is the base weights
            self._stacks[id(layer)] = (None, None, seen[key])
            layer.register_forward_hook(self._add_delta, with_kwargs=True)

    def changed(self) -> None:
        """A slot's weights were written: rebuild the stacks before the next mixed forward."""
        self._version += 1

    def begin(self, rows: list[str | None]) -> None:
        """Mix the next forward: row ``b`` gets slot ``rows[b]``'s delta (``None``: no delta, the base)."""
        import torch

        if self._built != self._version:
            self._build()
        index = [len(self.slots) if r is None else self.slots.index(r) for r in rows]
        device = self._patterns[0].device
        picks = torch.tensor(index, dtype=torch.long, device=device)
        self._coef = [table[picks][:, None, :] for table in self._patterns]

    def end(self) -> None:
        self._coef = None

    def _build(self) -> None:
        import torch

        version = self._version
        with torch.no_grad():
            for layer in self.layers:
                a = torch.cat([layer.lora_A[s].weight for s in self.slots], dim=0)
                b = torch.cat([layer.lora_B[s].weight for s in self.slots], dim=1)
                self._stacks[id(layer)] = (a, b, self._stacks[id(layer)][2])
        self._built = version

    def _add_delta(self, module, args, kwargs, output):
        """Forward hook of every LoRA layer: during a mixed forward, add each row's own delta."""
        if self._coef is None:
            return None
        import torch.nn.functional as F

        x = args[0] if args else kwargs["x"]
        a, b, pattern = self._stacks[id(module)]
        h = F.linear(x.to(a.dtype), a) * self._coef[pattern]
        return (output.to(h.dtype) + F.linear(h, b)).to(output.dtype)
