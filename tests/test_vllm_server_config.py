"""``engine: vllm_server`` without a server: its recipe fields (validated, refused with other engines, passed
to the engine) and the start-up errors of an engine whose servers do not answer (real HTTP to a closed port).
The engine against real vLLM servers: ``tests/vllm_engine/test_vllm_server_engine.py`` (``make test-vllm``)."""

from __future__ import annotations

import inspect
import socket

import pytest

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.engines.server_pool import normalise_url
from openclaw_trl.errors import UserError


def _config(tmp_path, **fields) -> OpenClawConfig:
    fields.setdefault("vllm_server_urls", ["http://127.0.0.1:8000"])
    fields.setdefault("temperature", 1.0)
    return OpenClawConfig(output_dir=str(tmp_path), report_to="none", engine="vllm_server", **fields)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_engine_kwargs_are_the_recipe_fields(tmp_path):
    config = _config(
        tmp_path,
        vllm_server_urls=["http://10.0.0.5:8000", "https://gpu1:8001/v1"],
        vllm_server_api_key_env="VLLM_KEY",
        vllm_server_request_timeout=30.0,
        vllm_server_max_learn_requests=2,
        vllm_server_timeout=600.0,
    )
    assert config.engine_kwargs(lora_config="lora", dtype="bfloat16") == {
        "urls": ["http://10.0.0.5:8000", "https://gpu1:8001/v1"],
        "api_key_env": "VLLM_KEY",
        "lora_config": "lora",
        "adapter_dir": f"{tmp_path}/served_adapters",
        "request_timeout": 30.0,
        "startup_timeout": 600.0,
        "max_learn_requests": 2,
    }
    assert (
        _config(tmp_path, vllm_server_adapter_dir="/mnt/shared/a").engine_kwargs()["adapter_dir"]
        == "/mnt/shared/a"
    )


def test_engine_kwargs_are_named_parameters_of_the_engine(tmp_path):
    from openclaw_trl.engines.vllm_server import VLLMServerEngine

    named = set(inspect.signature(VLLMServerEngine.__init__).parameters)
    assert set(_config(tmp_path).engine_kwargs()) <= named


USERS = [{"name": "alice", "api_key_env": "ALICE_KEY"}, {"name": "bob", "api_key_env": "BOB_KEY"}]


@pytest.mark.parametrize("engine", ["vllm", "vllm_server"])
def test_users_pass_max_adapters_to_the_vllm_engines(tmp_path, engine):
    """Both vLLM engines serve an adapter per user: ``max_adapters`` (default: the users) reaches them."""
    fields = {"vllm_server_urls": ["http://127.0.0.1:8000"]} if engine == "vllm_server" else {}
    config = OpenClawConfig(
        output_dir=str(tmp_path), report_to="none", engine=engine, temperature=1.0, users=USERS, **fields
    )
    assert config.engine_kwargs()["max_adapters"] == 2
    config = OpenClawConfig(
        output_dir=str(tmp_path), report_to="none", engine=engine, users=USERS, max_adapters=5, **fields
    )
    assert config.engine_kwargs()["max_adapters"] == 5
    without = OpenClawConfig(output_dir=str(tmp_path), report_to="none", engine=engine, **fields)
    assert "max_adapters" not in without.engine_kwargs()  # no users: the engines' default, one adapter


def test_max_adapters_is_a_parameter_of_both_vllm_engines():
    from openclaw_trl.engines.vllm import VLLMEngine
    from openclaw_trl.engines.vllm_server import VLLMServerEngine

    for engine in (VLLMEngine, VLLMServerEngine):
        assert inspect.signature(engine.__init__).parameters["max_adapters"].default == 1


def test_server_engine_refuses_a_bad_max_adapters():
    from openclaw_trl.engines.vllm_server import VLLMServerEngine

    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_adapters"):
            VLLMServerEngine("model", urls=["http://127.0.0.1:1"], max_adapters=bad)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"vllm_server_urls": []}, "needs vllm_server_urls"),
        ({"vllm_server_urls": ["127.0.0.1:8000"]}, "http"),
        ({"vllm_server_urls": ["ftp://host:8000"]}, "http"),
        ({"vllm_server_urls": ["http://a:1", "http://a:1/v1"]}, "twice"),
        ({"vllm_server_request_timeout": 0.0}, "vllm_server_request_timeout must be > 0"),
        ({"vllm_server_timeout": -1.0}, "vllm_server_timeout must be > 0"),
        ({"vllm_server_max_learn_requests": 0}, "vllm_server_max_learn_requests must be an integer >= 1"),
        ({"engine_max_batch_size": 8}, "engine_max_batch_size=8 configures engine: hf"),
        ({"vllm_gpu_memory_utilization": 0.5}, "configures engine: vllm, .*vllm serve options"),
        ({"method": "opd", "temperature": 0.7}, "temperature: 1.0"),
    ],
)
def test_bad_fields_are_refused(tmp_path, fields, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **fields)


@pytest.mark.parametrize(
    "engine, field, value",
    [
        ("hf", "vllm_server_urls", ["http://127.0.0.1:8000"]),
        ("vllm", "vllm_server_api_key_env", "KEY"),
        ("hf", "vllm_server_timeout", 10.0),
        ("hf", "vllm_server_max_learn_requests", 2),
    ],
)
def test_server_fields_are_refused_with_other_engines(tmp_path, engine, field, value):
    with pytest.raises(ValueError, match=f"configures engine: vllm_server, but the engine is {engine}"):
        OpenClawConfig(
            output_dir=str(tmp_path), report_to="none", engine=engine, temperature=1.0, **{field: value}
        )


def test_trl_server_client_fields_point_to_vllm_server(tmp_path):
    with pytest.raises(ValueError, match="use engine: vllm_server with vllm_server_urls"):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", vllm_server_base_url="http://h:8000")


def test_urls_are_normalised():
    assert normalise_url("http://h:8000/v1/") == "http://h:8000"
    assert normalise_url(" https://h ") == "https://h"
    with pytest.raises(ValueError, match="http"):
        normalise_url("h:8000")


def test_no_server_answering_is_a_user_error_that_says_how_to_start_one(tiny_model_dir):
    from openclaw_trl.engines import create_engine

    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(UserError, match=r"no vLLM server answered within 1 s .*vllm serve"):
        create_engine("vllm_server", tiny_model_dir, urls=[url], startup_timeout=1.0)


def test_a_missing_api_key_variable_is_a_user_error(tiny_model_dir, monkeypatch):
    from openclaw_trl.engines import create_engine

    monkeypatch.delenv("OPENCLAW_TEST_VLLM_KEY", raising=False)
    with pytest.raises(UserError, match="OPENCLAW_TEST_VLLM_KEY"):
        create_engine(
            "vllm_server", tiny_model_dir, urls=["http://127.0.0.1:1"], api_key_env="OPENCLAW_TEST_VLLM_KEY"
        )
