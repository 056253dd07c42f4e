"""Merge and push: the merged model computes what base + adapter computed, and the Hub gets a useful card.

The Hub is outside this machine, so ``push`` runs against a fake one (``HfApi.create_repo`` /
``create_branch`` / ``upload_folder`` patched to copy into a local directory); everything else is real.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from openclaw_trl import hub
from openclaw_trl.cli import main
from openclaw_trl.errors import UserError
from openclaw_trl.fsutil import RUN_INFO_FILE

RECIPE = "method: combine\nw_rl: 1.0\nw_opd: 1.0\nbatch_size: 16\nlearning_rate: 1.0e-5\n"


def _run_info(base: str, **overrides) -> dict:
    info = {
        "base_model": base,
        "method": "combine",
        "recipe_yaml": RECIPE,
        "num_updates": 12,
        "turns_used": 200,
        "samples_used": 187,
        "final_metrics": {"reward/mean": 0.4375, "opd/accepted_hint_rate": 0.25},
        "load_in_4bit": False,
        "library_versions": {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2", "trl": "1.16.0"},
    }
    info.update(overrides)
    return info


def _save_adapter(base_dir: Path, out: Path, seed: int = 1, target_modules="all-linear") -> Path:
    """A LoRA adapter on ``base_dir`` with random (non-zero) lora_B: merging really changes the weights."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=target_modules, task_type="CAUSAL_LM")
    )
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name or "lora_embedding_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A run dir as the trainer leaves it: metadata, final adapter at the root, checkpoints, and a store."""
    run = tmp_path_factory.mktemp("run")
    _save_adapter(tiny_model_dir, run)
    (run / RUN_INFO_FILE).write_text(json.dumps(_run_info(str(tiny_model_dir))))
    for step in (2, 10):
        checkpoint = run / f"checkpoint-{step}"
        checkpoint.mkdir()
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(run / name, checkpoint / name)
        (checkpoint / "optimizer.pt").write_bytes(b"optimizer state")
    (run / "store.sqlite").write_bytes(b"private conversations")
    return run


@pytest.fixture(scope="module")
def merged_dir(run_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merged") / "model"
    result = hub.merge_adapter(run_dir, out)
    assert result.adapter_dir == run_dir and result.dtype == "float32" and not result.trained_in_4bit
    return out


def _logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=input_ids).logits


def test_merged_logits_equal_base_plus_adapter(tiny_model_dir, run_dir, merged_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    input_ids = torch.randint(0, 2000, (3, 17), generator=torch.Generator().manual_seed(0))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    base_logits = _logits(base, input_ids)
    with_adapter = _logits(PeftModel.from_pretrained(base, run_dir).eval(), input_ids)
    merged = AutoModelForCausalLM.from_pretrained(
        merged_dir, dtype=torch.float32
    ).eval()  # plain Transformers

    assert not torch.allclose(with_adapter, base_logits, atol=1e-3)  # the adapter is not a no-op
    torch.testing.assert_close(_logits(merged, input_ids), with_adapter, atol=1e-5, rtol=0)
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_merged_dir_keeps_tokenizer_chat_template_and_generation_config(tiny_model_dir, merged_dir):
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    base_tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "hello"}]
    assert tokenizer.chat_template == base_tokenizer.chat_template
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n"
    )
    assert GenerationConfig.from_pretrained(merged_dir).eos_token_id == (
        GenerationConfig.from_pretrained(tiny_model_dir).eos_token_id
    )
    info = json.loads((merged_dir / RUN_INFO_FILE).read_text())
    assert info["method"] == "combine" and info["merged_into"] == str(tiny_model_dir)


def test_run_dir_without_final_adapter_uses_latest_checkpoint(run_dir, tmp_path):
    partial = tmp_path / "run"
    for step in (2, 10):
        shutil.copytree(run_dir / f"checkpoint-{step}", partial / f"checkpoint-{step}")
    assert hub.resolve_adapter_dir(partial) == partial / "checkpoint-10"  # numeric, not lexical, order
    assert hub.resolve_adapter_dir(run_dir) == run_dir


def test_adapter_trained_in_4bit_merges_into_full_precision_base(tiny_model_dir, run_dir, tmp_path):
    qlora_run = tmp_path / "qlora-run"
    shutil.copytree(run_dir, qlora_run, ignore=shutil.ignore_patterns("checkpoint-*"))
    (qlora_run / RUN_INFO_FILE).write_text(json.dumps(_run_info(str(tiny_model_dir), load_in_4bit=True)))
    assert main(["merge", "--adapter", str(qlora_run), "--out", str(tmp_path / "merged")]) == 0
    result_info = json.loads((tmp_path / "merged" / RUN_INFO_FILE).read_text())
    assert result_info["load_in_4bit"] is True and result_info["merge_dtype"] == "float32"


def test_prequantized_base_is_refused(tiny_model_dir, run_dir, tmp_path):
    quantized = tmp_path / "base-bnb-4bit"
    shutil.copytree(tiny_model_dir, quantized)
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (quantized / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="stored quantized.*full-precision model"):
        hub.merge_adapter(run_dir, tmp_path / "out", base=str(quantized))


def test_cli_merge_end_to_end_and_force(run_dir, tmp_path, capsys):
    out = tmp_path / "merged"
    assert main(["merge", "--adapter", str(run_dir / "checkpoint-2"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote the merged model to {out} (" in printed
    assert ": both are unchanged" in printed and "merged checkpoint" not in printed
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }

    assert main(["merge", "--adapter", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "--force" in err
    (out / "stale.bin").write_bytes(b"old")
    assert main(["merge", "--adapter", str(run_dir), "--out", str(out), "--force"]) == 0
    assert not (out / "stale.bin").exists()  # replaced, not mixed


@pytest.mark.parametrize(
    "make_path, message",
    [
        (lambda tmp: tmp / "nope", "does not exist"),
        (lambda tmp: tmp, "no adapter_config.json"),
    ],
)
def test_cli_merge_bad_adapter_path(tmp_path, capsys, make_path, message):
    (tmp_path / "notes.txt").write_text("not an adapter")
    assert main(["merge", "--adapter", str(make_path(tmp_path)), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_adapter_for_a_different_base_is_explained(tiny_model_dir, run_dir, tmp_path, capsys):
    from openclaw_trl.testing import build_model_dir, build_tiny_tokenizer, tiny_config_kwargs

    narrow = build_model_dir(
        tmp_path / "narrow",
        build_tiny_tokenizer(),
        {**tiny_config_kwargs(), "hidden_size": 32, "intermediate_size": 64},
    )
    argv = ["merge", "--adapter", str(run_dir), "--base", str(narrow), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "does not fit the base model" in err and re.search(
        r"takes \d+ inputs, the adapter expects \d+", err
    )
    assert f"trained on {str(tiny_model_dir)!r}" in err
    assert not (tmp_path / "o").exists()


def test_vocabulary_mismatch_is_explained(tiny_model_dir, tmp_path):
    from openclaw_trl.testing import build_tiny_model

    adapter = _save_adapter(tiny_model_dir, tmp_path / "emb", target_modules=["embed_tokens", "q_proj"])
    small_vocab = build_tiny_model(tmp_path / "small-vocab", vocab_size=1024)
    with pytest.raises(UserError, match=r"vocabulary size \d+ in the base, 2054 in the adapter"):
        hub.merge_adapter(adapter, tmp_path / "o", base=str(small_vocab))


# ------------------------------------------------------------------------------------------------ push


class FakeHub:
    """Stands in for huggingface.co: records repo creation and copies uploads into ``root/<repo>/<rev>``."""

    def __init__(self, root: Path):
        self.root, self.repos, self.branches, self.commits = root, {}, [], []

    def install(self, monkeypatch) -> FakeHub:
        from huggingface_hub import HfApi, RepoUrl

        fake = self

        def create_repo(api, repo_id, *, private=None, exist_ok=False, repo_type=None, **kwargs):
            assert exist_ok and repo_type in (None, "model")
            fake.repos.setdefault(repo_id, {"private": private})
            return RepoUrl(f"https://huggingface.co/{repo_id}")

        def create_branch(api, repo_id, *, branch, exist_ok=False, **kwargs):
            assert repo_id in fake.repos
            fake.branches.append((repo_id, branch))

        def upload_folder(api, *, repo_id, folder_path, revision=None, commit_message=None, **kwargs):
            from huggingface_hub.utils import filter_repo_objects

            assert repo_id in fake.repos
            folder = Path(folder_path)
            files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
            kept = filter_repo_objects(
                files,
                allow_patterns=kwargs.get("allow_patterns"),
                ignore_patterns=kwargs.get("ignore_patterns"),
            )
            target = fake.root / repo_id / (revision or "main")
            for rel in kept:
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(folder / rel, target / rel)
            fake.commits.append((repo_id, revision, commit_message))
            return type("Commit", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/0001"})()

        monkeypatch.setattr(HfApi, "create_repo", create_repo)
        monkeypatch.setattr(HfApi, "create_branch", create_branch)
        monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
        return self


@pytest.fixture
def fake_hub(tmp_path, monkeypatch) -> FakeHub:
    return FakeHub(tmp_path / "hub").install(monkeypatch)


def test_push_adapter_uploads_adapter_files_and_a_model_card(tiny_model_dir, run_dir, fake_hub, capsys):
    from huggingface_hub import ModelCard

    assert main(["push", "--adapter", str(run_dir), "--repo-id", "me/tiny-lora"]) == 0
    assert "https://huggingface.co/me/tiny-lora/commit/0001" in capsys.readouterr().out
    repo = fake_hub.root / "me/tiny-lora/main"
    files = {p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()}
    assert files == {"adapter_config.json", "adapter_model.safetensors", "README.md", RUN_INFO_FILE}
    assert fake_hub.repos == {"me/tiny-lora": {"private": False}}

    card = ModelCard.load(repo / "README.md")
    assert card.data.library_name == "peft" and {"openclaw-trl", "trl", "lora", "combine"} <= set(
        card.data.tags
    )
    text = card.text
    assert str(tiny_model_dir) in text  # base model (a local path here: kept out of the YAML header)
    assert card.data.base_model is None
    assert "`combine`" in text and "- **Optimizer updates:** 12" in text
    assert "- **Conversation turns used:** 200" in text and "- **Training samples used:** 187" in text
    assert f"```yaml\n{RECIPE.strip()}\n```" in text
    assert "| reward/mean | 0.4375 |" in text and "| peft | 0.21.2 |" in text
    assert 'PeftModel.from_pretrained(base, "me/tiny-lora")' in text
    assert "--enable-lora" in text and "LoRARequest(" in text and "max_lora_rank=8" in text
    assert 'AutoModelForCausalLM.from_pretrained("me/tiny-lora"' in text


def test_push_merged_to_a_private_branch(merged_dir, fake_hub, capsys):
    from huggingface_hub import ModelCard

    argv = ["push", "--merged", str(merged_dir), "--repo-id", "me/tiny-chat", "--private", "--revision", "v1"]
    assert main(argv + ["--commit-message", "first merge"]) == 0
    assert fake_hub.repos["me/tiny-chat"] == {"private": True} and fake_hub.branches == [
        ("me/tiny-chat", "v1")
    ]
    assert fake_hub.commits == [("me/tiny-chat", "v1", "first merge")]
    repo = fake_hub.root / "me/tiny-chat/v1"
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= {
        p.name for p in repo.iterdir()
    }
    card = ModelCard.load(repo / "README.md")
    assert card.data.library_name == "transformers" and "merged-lora" in card.data.tags
    assert 'LLM(model="me/tiny-chat")' in card.text and "vllm serve me/tiny-chat" in card.text
    assert "- **Merged in:** float32" in card.text


def test_push_refuses_a_merged_dir_that_is_an_adapter(run_dir, fake_hub, capsys):
    assert main(["push", "--merged", str(run_dir), "--repo-id", "me/x"]) == 2
    assert "push it with --adapter" in capsys.readouterr().err
    assert fake_hub.repos == {}


def test_model_card_metadata_names_a_hub_base_model():
    card = hub.build_model_card(
        kind="adapter",
        repo_id="me/q",
        base_model="Qwen/Qwen3-0.6B",
        run_info=_run_info("Qwen/Qwen3-0.6B", method="opd"),
    )
    assert card.data.base_model == "Qwen/Qwen3-0.6B" and card.data.base_model_relation == "adapter"
    assert (
        "opd" in card.data.tags and "[Qwen/Qwen3-0.6B](https://huggingface.co/Qwen/Qwen3-0.6B)" in card.text
    )
    assert "vllm serve Qwen/Qwen3-0.6B --enable-lora" in card.text


def test_unloadable_base_and_out_over_the_adapter_are_refused(run_dir, tmp_path):
    with pytest.raises(UserError, match="cannot load the base model"):
        hub.merge_adapter(run_dir, tmp_path / "o", base=str(tmp_path / "no-such-model"))
    with pytest.raises(UserError, match="would overwrite the adapter"):
        hub.merge_adapter(run_dir / "checkpoint-2", run_dir, force=True)
    assert (run_dir / "adapter_config.json").exists()


def test_tokenizer_larger_than_the_base_vocabulary_is_explained(tiny_model_dir, run_dir, tmp_path):
    from transformers import AutoTokenizer

    from openclaw_trl.testing import build_tiny_model

    adapter = tmp_path / "with-tokenizer"
    shutil.copytree(run_dir, adapter, ignore=shutil.ignore_patterns("checkpoint-*"))
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(adapter)  # as HF Trainer checkpoints do
    small_vocab = build_tiny_model(tmp_path / "small-vocab", vocab_size=1024)  # same layer shapes
    with pytest.raises(UserError, match=r"tokenizer has 2054 tokens, the base's vocabulary 10\d\d"):
        hub.merge_adapter(adapter, tmp_path / "o", base=str(small_vocab))

    same_shapes = build_tiny_model(tmp_path / "other-seed", seed=7)
    result = hub.merge_adapter(run_dir, tmp_path / "o2", base=str(same_shapes))
    assert "is not the base the adapter names" in result.notes[0]
