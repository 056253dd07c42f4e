"""The toy model shipped with the package (``openclaw_trl/toy/model``): what it is, that it is used without
pre-training or writing, that it still behaves as its ``world.json`` says, and that the project's own
pre-training regenerates a model that behaves the same (``python benchmarks/learning/pretrain.py --package``
rewrites it)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest

from openclaw_trl.toy import measure, pretrain, world

ROOT = Path(__file__).parent.parent
MAX_BYTES = 4_000_000  # 4 MB
RATES = (
    "bare",
    "hinted",
    "follow_up",
    "off_topic",
    "bare_brief",
    "hinted_brief",
    "hinted_both",
    "follow_up_brief",
    "follow_up_both",
    "bare_fidelity",
)
MAX_ANSWER_TOKENS = 36  # the benchmark and the demo sample at most 40 new tokens


def packaged_meta() -> dict:
    return json.loads((pretrain.PACKAGED_DIR / pretrain.META_FILE).read_text())


def snapshot(directory: Path) -> dict:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def assert_same_behaviour(measured: dict, recorded: dict) -> None:
    """Each rate within 3 standard errors of the difference of two binomial estimates on ``n`` samples
    (at least 0.05): two models with the same behaviour agree this closely but for 3 in 1000 draws."""
    n = recorded["n"]
    for key in RATES:
        a, b = measured[key]["rate"], recorded[key]["rate"]
        p = min(max((a + b) / 2, 0.02), 0.98)
        tolerance = max(0.05, 3 * math.sqrt(2 * p * (1 - p) / n))
        assert abs(a - b) <= tolerance, (
            f"{key}: measured {a:.3f}, recorded {b:.3f} (tolerance {tolerance:.3f})"
        )


def test_the_packaged_model_is_the_default_settings_and_small():
    meta = packaged_meta()
    settings = pretrain.PretrainSettings()
    assert meta["settings"] == asdict(settings)  # a changed default needs `pretrain.py --package`
    chats = world.training_chats(settings.n_chats, seed=settings.seed)
    assert meta["chats_digest"] == pretrain.chats_digest(chats)  # so does a changed world
    files = {p.name for p in pretrain.PACKAGED_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", pretrain.META_FILE} <= files
    assert ".gitignore" not in files and not any(name.startswith(".") for name in files)
    assert sum(p.stat().st_size for p in pretrain.PACKAGED_DIR.iterdir()) <= MAX_BYTES
    shipped = '"openclaw_trl.toy" = ["model/*"]'  # a non-editable install ships every file
    assert shipped in (ROOT / "pyproject.toml").read_text()


def test_toy_model_returns_the_packaged_model_without_training(tmp_path, monkeypatch):
    monkeypatch.setenv(pretrain.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(pretrain, "pretrain", lambda *a, **k: pytest.fail("pre-trained"))
    lines = []
    assert pretrain.toy_model(log=lines.append) == pretrain.PACKAGED_DIR
    assert pretrain.toy_model(pretrain.PretrainSettings(), log=lines.append) == pretrain.PACKAGED_DIR
    assert lines == [] and not (tmp_path / "cache").exists()
    assert pretrain.toy_model_dir(pretrain.TINY).parent == tmp_path / "cache"  # other settings: the cache


def test_the_off_topic_answer_fits_the_demo_answer_length():
    from transformers import AutoTokenizer

    from openclaw_trl.runtime import load_recipe

    config, _, _ = load_recipe(["--config", "recipes/toy_offline.yaml"])
    tokenizer = AutoTokenizer.from_pretrained(pretrain.PACKAGED_DIR)
    ids = tokenizer.encode(world.OFF_TOPIC_ANSWER + "<|im_end|>", add_special_tokens=False)
    assert len(ids) <= config.max_completion_length


def test_every_well_formed_answer_fits_the_sampled_length():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pretrain.PACKAGED_DIR)
    longest = max(
        len(tokenizer.encode(answer + "<|im_end|>", add_special_tokens=False))
        for topic in world.TOPICS
        for answer in world.well_formed_answers(topic)
    )
    assert longest <= MAX_ANSWER_TOKENS


def test_off_topic_messages_are_varied_and_held_out_ones_are_never_taught():
    settings = pretrain.PretrainSettings()
    chats = world.training_chats(settings.n_chats, seed=settings.seed)
    taught = {m["content"] for c in chats for m in c if m["role"] == "user"}
    off_topic = [c for c in chats if any(m["content"] == world.OFF_TOPIC_ANSWER for m in c)]
    assert 0.15 < len(off_topic) / len(chats) < 0.25
    held_out = world.held_out_off_topic(settings.measure_n)
    assert len(set(held_out)) > settings.measure_n // 2 and not taught & set(held_out)
    assert "Hi! What can you do?" in taught and "Tell me about cars." in taught
    for topic in world.TOPICS:
        assert topic in world.OFF_TOPIC_ANSWER and world.opening(topic) not in held_out


def test_the_packaged_model_behaves_as_recorded_and_is_only_read(one_thread):
    recorded = packaged_meta()["metrics"]
    assert recorded["hinted"]["rate"] >= 0.9 and recorded["follow_up"]["rate"] >= 0.9
    assert recorded["off_topic"]["rate"] >= 0.9 and 0.15 <= recorded["bare"]["rate"] <= 0.4
    assert recorded["bare"]["styles"]["off_topic"] <= 0.05  # requests are not taken for off-topic
    assert recorded["hinted_brief"]["rate"] >= 0.9 and recorded["hinted_both"]["rate"] >= 0.85
    assert recorded["follow_up_brief"]["rate"] >= 0.85 and recorded["follow_up_both"]["rate"] >= 0.85
    assert 0.2 <= recorded["bare_brief"]["rate"] <= 0.45 and recorded["bare_fidelity"]["rate"] >= 0.9
    before = snapshot(pretrain.PACKAGED_DIR)
    measured = measure.measure(pretrain.PACKAGED_DIR, n=recorded["n"])
    assert snapshot(pretrain.PACKAGED_DIR) == before  # serving reads it, never writes it
    assert_same_behaviour(measured, recorded)


@pytest.mark.long
def test_pretraining_again_regenerates_the_same_behaviour(tmp_path, one_thread):
    meta = packaged_meta()
    out = pretrain.pretrain(tmp_path / "again", pretrain.PretrainSettings(), log=lambda *_: None)
    again = json.loads((out / pretrain.META_FILE).read_text())
    assert again["settings"] == meta["settings"] and again["chats_digest"] == meta["chats_digest"]
    assert_same_behaviour(again["metrics"], meta["metrics"])
