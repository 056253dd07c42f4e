"""``openclaw-trl export``: the collected conversations and training samples as a Hugging Face dataset."""

from __future__ import annotations

import argparse

from openclaw_trl.commands.user_folder import add_user_argument, user_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        required=True,
        help="the SQLite store the server/trainer wrote (see the recipe), or the run's output_dir",
    )
    add_user_argument(parser, "conversations")
    parser.add_argument(
        "--out", default=None, help="directory for DatasetDict.save_to_disk (empty or absent)"
    )
    parser.add_argument(
        "--push-to-hub", default=None, metavar="REPO_ID", help="also push to this dataset repo"
    )
    parser.add_argument(
        "--include-private",
        action="store_true",
        help='include conversations marked "don\'t learn" (left out by default)',
    )
    parser.add_argument(
        "--public", action="store_true", help="create the Hub dataset repo public (default: private)"
    )
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    parser.add_argument("--commit-message", default=None, help="commit message on the Hub")


def run(args: argparse.Namespace) -> int:
    from openclaw_trl.export import export_store

    result = export_store(
        user_store(args.store, args.user),
        args.out,
        push_to_hub=args.push_to_hub,
        include_private=args.include_private,
        public=args.public,
        force=args.force,
        commit_message=args.commit_message,
    )
    counts = ", ".join(f"{n} {name}" for name, n in result.counts.items())
    scope = "private conversations included" if result.include_private else "private conversations left out"
    print(f"exported {counts} ({scope})")
    if result.out is not None:
        print(f"saved to {result.out} (reload with datasets.load_from_disk)")
    if result.repo_id is not None:
        print(
            f"pushed to https://huggingface.co/datasets/{result.repo_id} "
            f"({'public' if args.public else 'private'})"
        )
    return 0
