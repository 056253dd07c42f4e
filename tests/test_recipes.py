"""Every recipe parses with TrlParser into a valid OpenClawConfig + ModelConfig; accelerate configs load."""

from pathlib import Path

import pytest
import yaml

RECIPES = sorted(Path(__file__).parent.parent.glob("recipes/*.yaml"))
ACCELERATE = sorted(Path(__file__).parent.parent.glob("recipes/accelerate/*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_recipe_parses(recipe, tmp_path):
    from openclaw_trl.runtime import load_recipe

    text = recipe.read_text()
    assert text.startswith("# Hardware:"), "each recipe says what hardware it targets in its header"
    # GPU recipes ask for bf16; this CPU machine can only validate them in float32.
    config, model_args, recipe_yaml = load_recipe(
        ["--config", str(recipe), "--bf16", "false", "--output_dir", str(tmp_path)]
    )
    assert recipe_yaml == text
    assert config.method in ("rl", "opd", "combine")
    assert config.batch_size % config.per_device_train_batch_size == 0
    assert model_args.use_peft and model_args.lora_r == 16 and model_args.lora_alpha == 32
    if config.method == "rl":
        assert config.w_opd == 0.0
    if config.method == "opd":
        assert config.w_rl == 0.0


def test_cli_overrides_the_recipe(tmp_path):
    from openclaw_trl.runtime import load_recipe

    config, _, _ = load_recipe(
        ["--config", "recipes/tiny_simulated.yaml", "--learning_rate", "3e-4", "--output_dir", str(tmp_path)]
    )
    assert config.learning_rate == 3e-4 and config.max_steps == 3


def test_bad_recipe_value_is_a_clear_error(tmp_path, capsys):
    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.runtime import load_recipe

    with pytest.raises(SystemExit):  # argparse: "argument --method: invalid choice: 'ppo'"
        load_recipe(
            ["--config", "recipes/tiny_simulated.yaml", "--method", "ppo", "--output_dir", str(tmp_path)]
        )
    assert "invalid choice: 'ppo'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="method must be one of"):
        OpenClawConfig(output_dir=str(tmp_path), method="ppo")
    with pytest.raises(ValueError, match="judge_backend=callable needs judge_callable"):
        OpenClawConfig(output_dir=str(tmp_path), judge_backend="callable")
    with pytest.raises(ValueError, match="batch_size .* must be divisible"):
        load_recipe(
            ["--config", "recipes/tiny_simulated.yaml", "--batch_size", "6", "--output_dir", str(tmp_path)]
        )


@pytest.mark.parametrize("path", ACCELERATE, ids=[p.name for p in ACCELERATE])
def test_accelerate_configs_load(path):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(path))
    assert cfg.num_processes >= 1 and yaml.safe_load(path.read_text())["distributed_type"]


def test_vllm_opd_needs_temperature_one(tmp_path):
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(ValueError, match="temperature: 1.0"):
        OpenClawConfig(output_dir=str(tmp_path), engine="vllm", method="combine", temperature=0.6)
    assert (
        OpenClawConfig(output_dir=str(tmp_path), engine="vllm", method="rl", temperature=0.6).temperature
        == 0.6
    )
