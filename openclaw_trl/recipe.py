"""A recipe and the model it names: parse the recipe, find the model's files, its tokenizer and LoRA settings.

``load_recipe(argv)`` parses a recipe YAML (plus command-line overrides) with TRL's ``TrlParser`` into
``(OpenClawConfig, ModelConfig, recipe_yaml)``. ``resolve_model_path`` turns ``model_name_or_path`` into
what ``from_pretrained`` loads: a Hub id or a local directory as given, and three names built locally
(``TINY_MODEL_ID``, ``TINY_AGENT_MODEL_ID``: random tiny models for tests; ``TOY_MODEL_ID``: the pre-trained
toy model shipped with the package).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.errors import UserError
from openclaw_trl.toy import TOY_MODEL_ID

logger = logging.getLogger(__name__)

TINY_MODEL_ID = "openclaw-trl/tiny"
"""``model_name_or_path`` value that builds the tiny offline test model (random weights) on first use."""
TINY_AGENT_MODEL_ID = "openclaw-trl/tiny-agent"
"""The tiny model with Qwen's real vocabulary and a 65,536-token context, for agent-sized prompts
(``recipes/tiny_openclaw.yaml``)."""
_TINY_MODELS = {TINY_MODEL_ID: "tiny-model", TINY_AGENT_MODEL_ID: "tiny-agent-model"}


def load_recipe(argv: list[str] | None = None):
    """``(config, model_args, recipe_yaml)`` from ``--config recipe.yaml`` and CLI overrides (TrlParser)."""
    from trl import ModelConfig, TrlParser

    class Parser(TrlParser):
        def error(self, message):  # argparse's: the whole usage (hundreds of lines), then the message
            raise UserError(f"invalid recipe: {message} (openclaw-trl fields WORD lists the recipe fields)")

    parser = Parser((OpenClawConfig, ModelConfig))
    try:
        config, model_args = parser.parse_args_and_config(argv)
    except UserError:
        raise
    except ValueError as err:  # OpenClawConfig.__post_init__ says what is wrong and how to fix it
        raise UserError(unknown_fields(err, parser) or f"invalid recipe: {err}") from err
    recipe_yaml = None
    if argv and "--config" in argv:
        recipe_yaml = Path(argv[argv.index("--config") + 1]).read_text()
    return config, model_args, recipe_yaml


def unknown_fields(err: ValueError, parser) -> str | None:
    """The parser's errors for names that are no field (in the recipe, or on the command line) as one line
    naming the first one and the closest real field (None for any other error)."""
    import difflib
    import re

    in_recipe = "Unknown arguments from config file" in str(err)
    if not in_recipe and "not used by the HfArgumentParser" not in str(err):
        return None
    names = re.findall(r"'--([^'=]+)", str(err))
    if not names:
        return None
    known = [o.lstrip("-") for action in parser._actions for o in action.option_strings if o.startswith("--")]
    close = difflib.get_close_matches(names[0], known, n=1, cutoff=0.6)
    hint = f"did you mean `{close[0]}`? " if close else ""
    where = " in the recipe" if in_recipe else ""
    return f"unknown field `{names[0]}`{where}: {hint}(openclaw-trl fields WORD lists the recipe fields)"


def resolve_model_path(model_args, config: OpenClawConfig) -> str:
    """The local model directory (building the tiny model when the recipe names ``TINY_MODEL_ID`` or
    ``TINY_AGENT_MODEL_ID``; the pre-trained toy model shipped with the package when it names
    ``TOY_MODEL_ID``)."""
    name = model_args.model_name_or_path
    if not name:
        raise UserError("the recipe must set model_name_or_path (a Hub model id or a local directory)")
    if name in _TINY_MODELS:
        path = Path(config.output_dir) / _TINY_MODELS[name]
        if not (path / "config.json").exists():
            from openclaw_trl import testing

            try:
                (testing.build_tiny_model if name == TINY_MODEL_ID else testing.build_tiny_agent_model)(path)
            except ImportError as exc:
                raise UserError(str(exc)) from exc
        return str(path)
    if name == TOY_MODEL_ID:
        from openclaw_trl.toy.pretrain import toy_model

        return str(toy_model(log=logger.info))
    return name


def lora_config(model_args):
    """PEFT LoraConfig from TRL's ModelConfig; all linear projections unless the recipe names modules."""
    from trl import get_peft_config

    if not model_args.use_peft:
        return None
    if model_args.lora_target_modules is None:
        model_args = dataclasses.replace(model_args, lora_target_modules="all-linear")
    return get_peft_config(model_args)


def load_tokenizer(model_path: str):
    """The model's tokenizer; a model that cannot be loaded is a :class:`UserError` that says what to try."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path)
    except OSError as err:
        raise UserError(
            f"could not load the model {model_path!r} ({str(err).splitlines()[0]}). It is downloaded from the "
            "Hugging Face Hub on first use: check the connection, or point model_name_or_path at a local "
            f"copy. Offline, try the toy demo: make run RECIPE=recipes/toy_offline.yaml"
        ) from err


def model_init_kwargs(config: OpenClawConfig, model_args) -> dict | None:
    """The keyword arguments that load the trainer's model: the recipe's ``model_init_kwargs`` with its
    ``dtype`` and quantization (None when there are none). Neither argument is changed."""
    kwargs = dict(config.model_init_kwargs or {})
    if model_args.dtype not in (None, "auto"):
        kwargs["dtype"] = model_args.dtype
    if model_args.load_in_4bit or model_args.load_in_8bit:
        from trl import get_quantization_config

        kwargs["quantization_config"] = get_quantization_config(model_args)
    return kwargs or None
