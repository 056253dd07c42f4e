"""Generation engines behind one contract (``base.Engine``): Transformers (``hf``), colocated vLLM (``vllm``) and
running vLLM servers over HTTP (``vllm_server``).

The implementations are imported lazily so that ``import openclaw_trl.engines`` needs neither torch nor vllm.
"""

from __future__ import annotations

from openclaw_trl.engines.base import Completion, Engine, GenerationRequest, SamplingParams, Scores

__all__ = ["Completion", "Engine", "GenerationRequest", "SamplingParams", "Scores", "create_engine"]


def create_engine(kind: str, model_path, **kwargs) -> Engine:
    """Build an engine: ``kind="hf"`` → ``HFEngine``, ``kind="vllm"`` → ``VLLMEngine``, ``kind="vllm_server"`` →
    ``VLLMServerEngine``; kwargs go to its constructor."""
    if kind == "hf":
        from openclaw_trl.engines.hf import HFEngine

        return HFEngine(model_path, **kwargs)
    if kind == "vllm":
        from openclaw_trl.engines.vllm import VLLMEngine

        return VLLMEngine(model_path, **kwargs)
    if kind == "vllm_server":
        from openclaw_trl.engines.vllm_server import VLLMServerEngine

        return VLLMServerEngine(model_path, **kwargs)
    raise ValueError(f"unknown engine kind {kind!r}: expected 'hf', 'vllm' or 'vllm_server'")
