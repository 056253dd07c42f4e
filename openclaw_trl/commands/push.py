"""``openclaw-trl push``: upload an adapter or a merged model to the Hugging Face Hub, with a model card."""

from __future__ import annotations

import argparse

from openclaw_trl.commands.user_folder import add_user_argument, user_folder
from openclaw_trl.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--adapter", help="adapter dir, or a training run dir (only adapter files are uploaded)"
    )
    what.add_argument("--merged", help="a model directory written by `openclaw-trl merge`")
    add_user_argument(parser, "adapter (with --adapter)")
    parser.add_argument(
        "--repo-id", required=True, help="target repo on the Hub, e.g. your-name/my-chat-lora"
    )
    parser.add_argument("--private", action="store_true", help="create the repo as private")
    parser.add_argument(
        "--revision", default=None, help="branch to push to (created if missing; default: main)"
    )
    parser.add_argument("--commit-message", default=None, help="commit message on the Hub")


def run(args: argparse.Namespace) -> int:
    from openclaw_trl.hub import push_to_hub

    if args.adapter:
        kind, folder = "adapter", user_folder(args.adapter, args.user, "adapter")
    elif args.user is not None:
        raise UserError(
            "--user picks a user's adapter in a run folder (with --adapter); a --merged model is already "
            "one model: drop --user"
        )
    else:
        kind, folder = "merged", args.merged
    url = push_to_hub(
        folder,
        args.repo_id,
        kind=kind,
        private=args.private,
        revision=args.revision,
        commit_message=args.commit_message,
    )
    print(f"pushed {kind} from {folder} to {args.repo_id}: {url}")
    return 0
