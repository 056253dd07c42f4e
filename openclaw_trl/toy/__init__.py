"""The offline toy demo: a made-up world (:mod:`~openclaw_trl.toy.world`) and a small chat model
pre-trained on it from scratch on CPU (:mod:`~openclaw_trl.toy.pretrain`).

A recipe with ``model_name_or_path: openclaw-trl/toy`` (:data:`TOY_MODEL_ID`) serves that model:
it answers "Tell me about <topic>." in one of four styles and with one to three facts at random, learns a
preferred style (or length) from 👍/👎, and answers anything else with one sentence saying what it knows
and what to type. The model (3.5 MB) ships with the package in ``openclaw_trl/toy/model``, so it is ready at
once; models pre-trained with other settings are kept in the user cache directory
(``$OPENCLAW_TRL_CACHE``, else ``$XDG_CACHE_HOME/openclaw-trl`` or ``~/.cache/openclaw-trl``).
"""

from __future__ import annotations

TOY_MODEL_ID = "openclaw-trl/toy"
"""``model_name_or_path`` value that serves the pre-trained toy model shipped with the package."""
