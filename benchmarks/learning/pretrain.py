"""Pre-train the toy world's small chat model (``openclaw_trl.toy.pretrain``), then print its measurements.

    python benchmarks/learning/pretrain.py [--steps 240] [--seed 0] [--out DIR] [--force]

By default the checkpoint goes to the user cache (``openclaw_trl.toy.pretrain.toy_model_dir``), the one the
offline demo (``recipes/toy_offline.yaml``) serves; a second call with the same settings reuses it.
"""

from __future__ import annotations

import argparse
import json
import sys

from openclaw_trl.toy.pretrain import META_FILE, PretrainSettings, pretrain, report, toy_model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="default: the user cache directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=PretrainSettings.steps)
    parser.add_argument("--force", action="store_true", help="retrain even when a cached model matches")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # a shared 2-core machine: one thread is several times faster than two
    settings = PretrainSettings(seed=args.seed, steps=args.steps)
    out = pretrain(args.out or toy_model_dir(settings), settings, force=args.force, progress=True)
    print(report(json.loads((out / META_FILE).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
