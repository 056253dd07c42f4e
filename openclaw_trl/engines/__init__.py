from openclaw_trl.engines.base import Completion, Engine, GenerationRequest, SamplingParams, Scores

__all__ = ["Completion", "Engine", "GenerationRequest", "SamplingParams", "Scores"]
