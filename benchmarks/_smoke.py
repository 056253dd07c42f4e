"""The ``--smoke`` flag every stage script of ``run_all.py`` accepts: that the benchmark still runs.

A smoke run uses the tiny model and the fewest steps, rounds and tokens that still go through every path of
the script's report (seconds to a minute on 2 CPU cores); it writes the same JSON as a real run, whose
figures mean nothing. ``run_all.py --smoke`` calls each stage with ``--smoke`` and ``--out PATH`` in place
of its size arguments, so a new stage only has to honour these two flags.
"""

from __future__ import annotations

import argparse


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None, smoke: dict) -> argparse.Namespace:
    """Add ``--smoke`` to ``parser`` and parse ``argv``: with ``--smoke`` the values in ``smoke`` (argument
    dest -> value) become the defaults, so sizes given explicitly on the command line still win."""
    sizes = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in smoke.items() if v is not True)
    flags = ", ".join(f"--{k.replace('_', '-')}" for k, v in smoke.items() if v is True)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"that it runs, in seconds ({', '.join(x for x in (flags, sizes) if x)}); the figures mean nothing",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args(argv)
    return args
