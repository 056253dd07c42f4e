"""``openclaw-trl merge``: a new standalone model (base + trained LoRA adapter), for serving without PEFT.

The base model and the adapter are only read: the merged weights are a copy, written to ``--out``.
"""

from __future__ import annotations

import argparse

from openclaw_trl.commands.user_folder import add_user_argument, user_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--adapter",
        required=True,
        help="adapter dir, or a training run dir (its final adapter, else its latest checkpoint-<step>)",
    )
    add_user_argument(parser, "adapter")
    parser.add_argument(
        "--out", required=True, help="directory for the merged model (must be empty or absent)"
    )
    parser.add_argument(
        "--base",
        default=None,
        help="base model id or path (default: the one adapter_config.json names); loaded unquantized",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="dtype of the merged weights (default: the dtype the base is stored in)",
    )
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out directory")


def run(args: argparse.Namespace) -> int:
    from openclaw_trl.hub import merge_adapter

    result = merge_adapter(
        user_folder(args.adapter, args.user, "adapter"),
        args.out,
        base=args.base,
        force=args.force,
        dtype=args.dtype,
    )
    print(
        f"wrote the merged model to {result.out} ({result.dtype}): model, tokenizer, chat template, generation config"
    )
    print(
        f"  made from the base model {result.base_model} and the adapter {result.adapter_dir}: both are unchanged"
    )
    if result.trained_in_4bit:
        print("  (the adapter was trained on a 4-bit base; it was merged into the full-precision weights)")
    for note in result.notes:
        print(f"note: {note}")
    return 0
