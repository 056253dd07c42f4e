"""Pre-train the toy world's small chat model (``openclaw_trl.toy.pretrain``), then print its measurements.

    python benchmarks/learning/pretrain.py [--steps N] [--seed 0] [--out DIR] [--force]
    python benchmarks/learning/pretrain.py --package     # regenerate the model shipped with the package

By default the checkpoint goes to the user cache (``openclaw_trl.toy.pretrain.toy_model_dir``); a second call
with the same settings reuses it. ``--package`` writes the default settings' model into
``openclaw_trl/toy/model`` (``PACKAGED_DIR``), the one the offline demo (``recipes/toy_offline.yaml``)
serves without pre-training; ``tests/test_toy_package.py`` checks that a regeneration behaves the same.
"""

from __future__ import annotations

import argparse
import json
import sys

from openclaw_trl.toy.pretrain import (
    META_FILE,
    PACKAGED_DIR,
    PretrainSettings,
    pretrain,
    report,
    toy_model_dir,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="default: the user cache directory")
    parser.add_argument(
        "--package",
        action="store_true",
        help="pre-train the default settings' model into openclaw_trl/toy/model (the one shipped with the "
        "package), replacing it",
    )
    parser.add_argument("--seed", type=int, default=PretrainSettings.seed)
    parser.add_argument("--steps", type=int, default=PretrainSettings.steps)
    parser.add_argument("--force", action="store_true", help="retrain even when a cached model matches")
    args = parser.parse_args(argv)
    settings = PretrainSettings(seed=args.seed, steps=args.steps)
    if args.package and (args.out or settings != PretrainSettings()):
        parser.error("--package writes the default settings' model: drop --out, --seed and --steps")
    import torch

    torch.set_num_threads(1)  # a model this small trains several times faster on one thread than on two
    out = PACKAGED_DIR if args.package else args.out or toy_model_dir(settings)
    force = args.force or args.package  # the packaged model may predate a change to the world's chats
    out = pretrain(out, settings, force=force, progress=True, ignored=not args.package)
    print(report(json.loads((out / META_FILE).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
