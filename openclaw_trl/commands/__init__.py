"""One module per ``openclaw-trl`` subcommand: ``add_arguments(parser)`` and ``run(args)``."""
