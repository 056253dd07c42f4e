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
    from openclaw_trl.errors import UserError
    from openclaw_trl.runtime import load_recipe

    with pytest.raises(UserError, match="argument --method: invalid choice: 'ppo'"):  # one line, no usage
        load_recipe(
            ["--config", "recipes/tiny_simulated.yaml", "--method", "ppo", "--output_dir", str(tmp_path)]
        )
    assert "usage:" not in capsys.readouterr().err
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


def test_component_settings_come_from_the_config_with_the_components_defaults(tmp_path):
    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.judging import JudgeConfig
    from openclaw_trl.serving.settings import ServerSettings
    from openclaw_trl.sessions import SessionConfig

    config = OpenClawConfig(output_dir=str(tmp_path), report_to="none")
    assert config.session_config() == SessionConfig()  # one session_idle_timeout everywhere: 1800 s
    assert config.session_idle_timeout == 1800.0
    assert config.judge_config() == JudgeConfig()
    server = config.server_settings(port=0, ui=False)
    assert (server.host, server.api_key_env, server.port, server.ui) == (
        ServerSettings.host,
        ServerSettings.api_key_env,
        0,
        False,
    )
    assert config.server_settings().port == ServerSettings.port
    custom = OpenClawConfig(
        output_dir=str(tmp_path), report_to="none", session_idle_timeout=60, train_anonymous=True
    )
    assert custom.session_config() == SessionConfig(session_idle_timeout=60, train_anonymous=True)
    with pytest.raises(ValueError, match="session_idle_timeout must be > 0"):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", session_idle_timeout=0)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", judge_timeout_s=0)


def test_engine_arguments_are_explicit_per_engine(tmp_path):
    from openclaw_trl.config import OpenClawConfig

    hf = OpenClawConfig(output_dir=str(tmp_path), report_to="none", engine_max_batch_size=8)
    assert hf.engine_kwargs(lora_config="lora", dtype="auto") == {
        "lora_config": "lora",
        "dtype": None,
        "max_batch_size": 8,
        "prefix_cache_mb": 4096,
    }
    vllm = OpenClawConfig(
        output_dir=str(tmp_path),
        report_to="none",
        engine="vllm",
        temperature=1.0,
        vllm_gpu_memory_utilization=0.45,
        vllm_max_model_length=16384,
        w_kd=1.0,
        kd_topk=32,
    )
    assert vllm.engine_kwargs(lora_config="lora", dtype="bfloat16") == {
        "lora_config": "lora",
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.45,
        "enable_sleep_mode": False,
        "max_logprobs": 32,
        "max_model_len": 16384,
    }
    assert (
        "max_model_len"
        not in OpenClawConfig(
            output_dir=str(tmp_path), report_to="none", engine="vllm", temperature=1.0
        ).engine_kwargs()
    )


@pytest.mark.parametrize(
    "engine, field, value",
    [
        ("hf", "vllm_gpu_memory_utilization", 0.45),
        ("hf", "vllm_enable_sleep_mode", True),
        ("hf", "vllm_max_model_length", 8192),
        ("vllm", "engine_max_batch_size", 8),
    ],
)
def test_a_field_of_the_other_engine_is_refused(tmp_path, engine, field, value):
    from openclaw_trl.config import OpenClawConfig

    with pytest.raises(ValueError, match=f"{field}={value!r} configures engine: .*remove {field}"):
        OpenClawConfig(
            output_dir=str(tmp_path), report_to="none", engine=engine, temperature=1.0, **{field: value}
        )


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_engine_arguments_are_named_parameters_of_the_engine(tmp_path, engine):
    """Every argument the config builds is a named parameter of the engine's constructor (none would fall
    into vLLM's pass-through ``**llm_kwargs``, nor be dropped)."""
    import inspect

    from openclaw_trl.config import OpenClawConfig
    from openclaw_trl.engines.hf import HFEngine
    from openclaw_trl.engines.vllm import VLLMEngine

    cls = {"hf": HFEngine, "vllm": VLLMEngine}[engine]
    vllm_only = {"vllm_max_model_length": 4096} if engine == "vllm" else {}
    config = OpenClawConfig(output_dir=str(tmp_path), report_to="none", engine=engine, **vllm_only)
    named = {
        name
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    }
    assert set(config.engine_kwargs(lora_config=None, dtype="float32")) <= named
