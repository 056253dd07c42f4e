"""The offline toy demo: a made-up world (:mod:`~openclaw_trl.toy.world`) and a small chat model
pre-trained on it from scratch on CPU (:mod:`~openclaw_trl.toy.pretrain`).

A recipe with ``model_name_or_path: openclaw-trl/toy`` (:data:`TOY_MODEL_ID`) serves that model:
it answers "Tell me about <topic>." in one of four styles at random and learns a preferred one from
👍/👎. The model is pre-trained on first use and cached in the user cache directory
(``$OPENCLAW_TRL_CACHE``, else ``$XDG_CACHE_HOME/openclaw-trl`` or ``~/.cache/openclaw-trl``).
"""

from __future__ import annotations

TOY_MODEL_ID = "openclaw-trl/toy"
"""``model_name_or_path`` value that serves the pre-trained toy model (pre-trained on first use)."""
