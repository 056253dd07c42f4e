"""Simulated-user evaluation of a served model (the reference's GSM8K student / teacher protocol).

``openclaw-trl eval --persona student --problems 36 --server http://127.0.0.1:7860/v1
--user-llm-base-url http://host:port/v1 --user-llm-model NAME [--user-llm-api-key-env VAR]``

A persona LLM (any OpenAI-compatible endpoint) plays a homework student or a grading teacher and talks to
our server through the API, one session per problem, so the server learns from these conversations as it
would from people. The score of a problem is the persona's 0-1 rating of the first reply; the command
prints the mean. See :mod:`openclaw_trl.eval.personas` (prompts, rating parser) and
:mod:`openclaw_trl.eval.runner` (the loop). Problems: the first 100 of the GSM8K test set (MIT licence,
``GSM8K_LICENSE.md``).
"""

from openclaw_trl.eval.personas import PERSONAS, parse_rating
from openclaw_trl.eval.runner import EvalResult, EvalSettings, evaluate, load_problems
from openclaw_trl.openai_client import OpenAIClient

__all__ = [
    "PERSONAS",
    "EvalResult",
    "EvalSettings",
    "OpenAIClient",
    "evaluate",
    "load_problems",
    "parse_rating",
]
