"""``openclaw-trl merge``: fold a trained LoRA adapter into its base model, for serving without PEFT."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--adapter",
        required=True,
        help="adapter dir, or a training run dir (its final adapter, else its latest checkpoint-<step>)",
    )
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

    result = merge_adapter(args.adapter, args.out, base=args.base, force=args.force, dtype=args.dtype)
    note = (
        " (adapter trained on a 4-bit base, merged into the full-precision weights)"
        if result.trained_in_4bit
        else ""
    )
    print(f"merged {result.adapter_dir} into {result.base_model} ({result.dtype}){note}")
    print(f"saved model, tokenizer, chat template and generation config to {result.out}")
    for note in result.notes:
        print(f"note: {note}")
    return 0
