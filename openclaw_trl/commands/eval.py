"""``openclaw-trl eval``: simulated GSM8K student / teacher users rate a running server's first answers.

    openclaw-trl eval --persona student --problems 36 --server http://127.0.0.1:7860/v1 \\
        --user-llm-base-url http://127.0.0.1:30001/v1 --user-llm-model qwen3-4b-user-llm \\
        [--user-llm-api-key-env OPENAI_API_KEY] [--max-turns 8] [--output eval.json]

Prints one line per problem and the mean rating (0-1) of the first answers. Run it before and after
training (or while the server learns: every conversation is a training session) to see the change.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def add_arguments(parser) -> None:
    parser.add_argument("--persona", choices=["student", "teacher"], default="student")
    parser.add_argument(
        "--problems", type=int, default=36, help="how many GSM8K test problems (max 100 packaged)"
    )
    parser.add_argument("--offset", type=int, default=0, help="index of the first problem")
    parser.add_argument("--data", default=None, help="a GSM8K-style JSON file instead of the packaged subset")
    parser.add_argument("--server", default="http://127.0.0.1:7860/v1", help="our server's OpenAI base URL")
    parser.add_argument("--model", default="openclaw", help="the model name our server serves")
    parser.add_argument("--server-api-key-env", default=None, help="env var with our server's API key")
    parser.add_argument("--server-max-tokens", type=int, default=None)
    parser.add_argument("--user-llm-base-url", required=True, help="the persona LLM's OpenAI base URL")
    parser.add_argument("--user-llm-model", required=True)
    parser.add_argument("--user-llm-api-key-env", default="OPENAI_API_KEY", help="env var with its key")
    parser.add_argument("--user-llm-temperature", type=float, default=0.7)
    parser.add_argument("--user-llm-max-tokens", type=int, default=1024)
    parser.add_argument("--max-turns", type=int, default=8, help="replies per conversation at most")
    parser.add_argument("--concurrency", type=int, default=1, help="problems in flight at once")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per HTTP request")
    parser.add_argument("--output", default=None, help="write every conversation's result as JSON here")


def _key(env: str | None) -> str | None:
    return (os.environ.get(env) or None) if env else None


def run(args) -> int:
    from openclaw_trl.eval import EvalSettings, OpenAIClient, evaluate, load_problems

    settings = EvalSettings(
        persona=args.persona,
        max_turns=args.max_turns,
        user_temperature=args.user_llm_temperature,
        user_max_tokens=args.user_llm_max_tokens,
        server_max_tokens=args.server_max_tokens,
        concurrency=args.concurrency,
    )
    problems = load_problems(args.problems, args.offset, args.data)
    server = OpenAIClient(args.server, args.model, _key(args.server_api_key_env), args.timeout)
    user_llm = OpenAIClient(
        args.user_llm_base_url, args.user_llm_model, _key(args.user_llm_api_key_env), args.timeout
    )

    def show(p) -> None:
        score = "-" if p.score is None else f"{p.score:.2f}"
        status = f"error: {p.error}" if p.error else ("done" if p.finished else "turn limit")
        print(f"problem {p.index:4d}  rating {score:>4}  replies {p.replies}  {status}", flush=True)

    try:
        result = evaluate(server, user_llm, problems, settings, offset=args.offset, on_result=show)
    finally:
        server.close()
        user_llm.close()
    summary = result.summary()
    if args.output:
        Path(args.output).write_text(json.dumps(result.to_json(), indent=2))
    mean = summary["mean_score"]
    print(
        f"{args.persona}: mean rating of the first answer "
        f"{'n/a' if mean is None else f'{mean:.3f}'} over {summary['rated']}/{summary['problems']} rated "
        f"problems ({summary['finished']} finished within {args.max_turns} turns, {summary['errors']} errors)"
    )
    if summary["errors"] == summary["problems"]:
        print("every conversation failed: is the server / the user LLM reachable?", file=sys.stderr)
        return 1
    return 0
