"""The private members of TRL's ``GRPOTrainer`` and Transformers' ``Trainer`` that ``OpenClawTrainer`` relies on.

A private member can change in any release; ``pyproject.toml`` bounds ``trl`` to the minor version tested, and
``make test-trl-newest`` runs this file and the trainer's tests against the newest TRL on the package index. Each
failure names the member, the TRL and Transformers versions, and what the trainer uses it for, so a new release
that breaks the trainer says where. The same list is in ``docs/architecture.md`` ("TRL members the trainer relies
on"), checked below.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import transformers
import trl
from trl import GRPOTrainer

from openclaw_trl.store import Store
from tests.trainer_helpers import make_trainer

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Member:
    """One private member: its name, the parameters the trainer passes or overrides (methods; None for an
    attribute set by the constructor), and what the trainer does with it."""

    name: str
    params: tuple[str, ...] | None
    use: str


MEMBERS = (
    Member(
        "_generate_and_score_completions",
        ("self", "inputs"),
        "overridden: a batch comes from the store (judged samples) instead of being generated",
    ),
    Member(
        "_get_per_token_logps_and_entropies",
        ("self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy"),
        "overridden and called: the policy's log-probs of the stored completions",
    ),
    Member(
        "_load_from_checkpoint", ("self", "resume_from_checkpoint", "model"), "a rollback restores weights"
    ),
    Member("_load_optimizer_and_scheduler", ("self", "checkpoint"), "a rollback restores the optimizer"),
    Member("_load_rng_state", ("self", "checkpoint"), "a rollback restores the RNG (one load at a time)"),
    Member("_save_checkpoint", ("self", "model", "trial"), "every update is checkpointed as its version"),
    Member(
        "_prepare_inputs",
        ("self", "generation_batch"),
        "overridden: a micro-step retried after running out of memory reuses the batch TRL holds",
    ),
    Member(
        "_get_output_dir", ("self", "trial"), "a checkpoint is written into a staging folder, then renamed"
    ),
    Member("_buffered_inputs", None, "whether TRL holds a generation batch between two steps"),
    Member("_step", None, "the micro-step count that decides when a new batch is taken"),
    Member("_metrics", None, "openclaw-trl's metrics are averaged and logged with TRL's"),
    Member("_globalstep_last_logged", None, "after a rollback, the next logged loss covers one update"),
)
SET_BY_THE_TRAINING_LOOP = {"_globalstep_last_logged"}
"""Attributes the Trainer sets when training starts and reads while logging: the trainer writes this one."""

VERSIONS = f"trl {trl.__version__}, transformers {transformers.__version__}"


def _broken(member: Member, why: str) -> str:
    return (
        f"{VERSIONS}: GRPOTrainer.{member.name} {why}; OpenClawTrainer relies on it ({member.use}). Bound trl "
        "below this release in pyproject.toml, or adapt openclaw_trl/trainer to it."
    )


@pytest.mark.parametrize("member", [m for m in MEMBERS if m.params is not None], ids=lambda m: m.name)
def test_methods_the_trainer_overrides_or_calls_keep_their_parameters(member):
    method = getattr(GRPOTrainer, member.name, None)
    assert callable(method), _broken(member, "is gone")
    params = tuple(inspect.signature(method).parameters)
    assert params[: len(member.params)] == member.params, _broken(
        member, f"now takes {params}, not {member.params} first"
    )


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trl-members")
    return make_trainer(tiny_model_dir, tmp, Store(str(tmp / "store.sqlite")))


@pytest.mark.parametrize("member", [m for m in MEMBERS if m.params is None], ids=lambda m: m.name)
def test_attributes_the_trainer_reads_are_still_there(trainer, member):
    if member.name in SET_BY_THE_TRAINING_LOOP:
        source = inspect.getsource(transformers.Trainer)
        assert f"self.{member.name}" in source, _broken(member, "is no longer read by the training loop")
    else:
        assert hasattr(trainer, member.name), _broken(member, "is no longer set by the constructor")


def test_the_trainer_logs_its_metrics_where_trl_keeps_its_own(trainer):
    metrics = next(m for m in MEMBERS if m.name == "_metrics")
    assert "train" in trainer._metrics, _broken(metrics, "has no 'train' entry")
    trainer.log_metric("openclaw/check", 1.0)
    assert trainer._metrics["train"]["openclaw/check"] == [1.0]


def test_the_architecture_doc_lists_the_same_members():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### TRL members the trainer relies on", 1)[1].split("\n#", 1)[0]
    listed = set(re.findall(r"^\| `(_[a-z_]+)`", section, flags=re.M))
    assert listed == {m.name for m in MEMBERS}
