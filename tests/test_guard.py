"""The version guard: a new adapter is compared with the base before it is served; one past a bound is held back,
the trainer rewinds to the last version that passed (weights and optimizer) and serves those weights under the
step's number, and the held-back update's samples are kept out of training with the reason.

The verdict rules are checked on their own (``VersionGuard.check`` with given comparisons); the trainer's side on
the tiny model with a real store, real training steps and a recording engine."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from transformers import TrainerCallback

from openclaw_trl.config import OpenClawConfig
from openclaw_trl.status import LearningStatus
from openclaw_trl.store import Store
from openclaw_trl.trainer.guard import IMPLAUSIBLE_LOGP, Comparison, GuardConfig, ProbeRow, VersionGuard
from openclaw_trl.trainer.progress import ProgressCallback, TrainingProgress
from tests.trainer_helpers import make_trainer, sampled

ROWS = [ProbeRow((1, 2), (1, 2), (3, 4), "neutral")]


def _verdict(kl: float, gap: float, finite: bool = True, implausible: float = 0.0, **config):
    guard = VersionGuard(GuardConfig(**config), render=lambda messages, tools: [1], recent_turns=lambda n: [])
    return guard.check(ROWS, lambda rows: Comparison(kl, 1.0 + gap, 1.0, 2, implausible), finite)


def test_a_version_within_the_bounds_passes_and_reports_its_signals():
    verdict = _verdict(0.2, -0.2, implausible=0.004)
    assert verdict.passed and verdict.reason is None
    metrics = verdict.metrics()
    assert metrics["guard/implausible"] == pytest.approx(0.004)
    assert metrics["guard/held"] == 0.0 and metrics["guard/kl"] == pytest.approx(0.2)
    assert metrics["guard/entropy_gap"] == pytest.approx(-0.2) and metrics["guard/rows"] == 1.0


@pytest.mark.parametrize(
    ("kl", "gap", "finite", "words"),
    [
        (
            1.5,
            0.0,
            True,
            "moved away from anything the starting model would say, even told what you asked for (KL 1.50",
        ),
        (0.1, -1.3, True, "became repetitive"),
        (0.1, 1.3, True, "became erratic"),
        (float("nan"), 0.0, True, "could not be scored"),
        (0.0, 0.0, False, "weights hold inf or NaN"),
    ],
)
def test_a_version_past_a_bound_is_held_with_the_reason_in_plain_words(kl, gap, finite, words):
    verdict = _verdict(kl, gap, finite)
    assert not verdict.passed and words in verdict.reason and verdict.metrics()["guard/held"] == 1.0


def test_a_version_that_moves_mass_onto_implausible_words_is_held_even_with_a_small_kl():
    verdict = _verdict(0.05, 0.0, implausible=0.03)
    assert not verdict.passed and verdict.kl == pytest.approx(0.05)
    assert "started to go wrong" in verdict.reason and "3.0% of its probability" in verdict.reason
    assert _verdict(0.05, 0.0, implausible=0.03, max_implausible=0.05).passed


def test_nothing_to_compare_on_passes():
    guard = VersionGuard(GuardConfig(), render=lambda messages, tools: [1], recent_turns=lambda n: [])
    assert guard.check([], lambda rows: pytest.fail("no rows: nothing to compute")).passed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(guard_max_kl=0), "guard_max_kl must be a number > 0"),
        (dict(guard_max_kl=float("inf")), "guard_max_kl must be a number > 0"),
        (dict(guard_max_implausible=0), "guard_max_implausible must be a number > 0"),
        (dict(guard_max_implausible=float("nan")), "guard_max_implausible must be a number > 0"),
        (dict(guard_max_entropy_drop=-1.0), "guard_max_entropy_drop and guard_max_entropy_rise must be"),
        (dict(guard_max_entropy_rise=0), "guard_max_entropy_drop and guard_max_entropy_rise must be"),
        (dict(guard_recent_prompts=-1), "guard_recent_prompts must be an integer >= 0"),
        (dict(guard_recent_prompts=0, guard_neutral_prompts=[]), "needs guard_recent_prompts > 0"),
        (dict(guard_neutral_prompts=["  "]), "guard_neutral_prompts must be a list of non-empty strings"),
    ],
)
def test_config_refuses_a_guard_that_cannot_work(tmp_path, fields, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        OpenClawConfig(output_dir=str(tmp_path), report_to="none", **fields)


def test_a_guard_that_is_off_needs_no_rows(tmp_path):
    config = OpenClawConfig(
        output_dir=str(tmp_path),
        report_to="none",
        guard=False,
        guard_recent_prompts=0,
        guard_neutral_prompts=[],
    )
    assert not config.guard_config().enabled


class RecordingEngine:
    """What the trainer publishes: ``(version, adapter tensors)``."""

    def __init__(self):
        self.published: list[tuple[int, dict]] = []

    def publish_adapter(self, state, version: int) -> None:
        self.published.append((version, {k: v.clone() for k, v in state.items()}))


class Relax(TrainerCallback):
    """After the first update, loosen the guard's bounds (the second update passes)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        guard = self.trainer.guard
        guard.config = dataclasses.replace(
            guard.config, max_kl=1e9, max_entropy_drop=1e9, max_entropy_rise=1e9
        )


def _lora(trainer) -> dict[str, torch.Tensor]:
    model = trainer.accelerator.unwrap_model(trainer.model)
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_a_held_back_update_is_rewound_and_its_weights_are_never_served(tiny_model_dir, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    ids = [store.queue.add_sample(s) for s in sampled(tiny_model_dir, 8, hint=True)]
    trainer = make_trainer(
        tiny_model_dir, tmp_path, store, max_steps=2, learning_rate=0.05, guard_max_kl=1e-9
    )
    engine = trainer.engine = RecordingEngine()
    progress = TrainingProgress()
    trainer.add_callback(ProgressCallback(progress))
    trainer.add_callback(Relax(trainer))
    initial = _lora(trainer)
    trainer.train()

    versions = [v for v, _ in engine.published]
    assert versions == [0, 1, 2]  # the held-back step still takes its number
    served_at_1 = engine.published[1][1]
    for key, tensor in engine.published[0][1].items():
        assert torch.equal(served_at_1[key], tensor)  # v1 serves v0's weights: the trained ones never served
    assert any(not torch.equal(engine.published[2][1][k], t) for k, t in served_at_1.items())  # v2 trained

    held = store.lineage.published_version(1)
    assert (held.parent, held.updates) == (0, 0) and held.note.startswith("held: its answers moved away")
    assert store.lineage.published_version(2).parent == 1  # v2 trained from v1 = v0's weights
    rows = {s.sample_id: s for s in store.queries.iter_samples()}
    reasons = [rows[i].dropped_reason for i in ids if rows[i].consumed_step == 1]
    assert len(reasons) == 4 and all(
        r.startswith("rolled_back: update 1 held back by the guard (its answers moved away") for r in reasons
    )
    assert all(rows[i].dropped_reason is None for i in ids if rows[i].consumed_step == 2)

    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["guard/held"] for e in logged] == [1.0, 0.0]
    assert logged[0]["guard/kl"] > 1e-9 and logged[0]["guard/seconds"] >= 0
    status = LearningStatus(trainer.args, None, store, progress)()
    assert status["guard"]["held_back"] == [1] and status["guard"]["enabled"]
    assert status["guard"]["last"].startswith("v1 was held back: its answers moved away")
    assert status["guard"]["last"].endswith("The weights of v0 served in its place.")
    assert set(initial) == set(_lora(trainer))


def test_the_rewind_restores_the_optimizer_state_of_the_last_good_version(tiny_model_dir, tmp_path):
    """Step 1 passes (Adam has moments), step 2 is held back: the moments go back to step 1's, so the next
    update does not keep moving on the momentum that led astray."""
    store = Store(tmp_path / "store.sqlite")
    for s in sampled(tiny_model_dir, 12, hint=True):
        store.queue.add_sample(s)
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=2, learning_rate=0.05)
    seen = {}

    class Tighten(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                seen["after_1"] = {
                    k: {n: t.clone() for n, t in v.items() if torch.is_tensor(t)}
                    for k, v in trainer.optimizer.state_dict()["state"].items()
                }
                trainer.guard.config = dataclasses.replace(trainer.guard.config, max_kl=1e-12)

    trainer.add_callback(Tighten())
    trainer.train()
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["guard/held"] for e in logged] == [0.0, 1.0]
    now = trainer.optimizer.state_dict()["state"]
    assert set(now) == set(seen["after_1"])
    for key, moments in seen["after_1"].items():
        for name, tensor in moments.items():
            assert torch.equal(now[key][name], tensor), (key, name)


def test_full_fine_tuning_refuses_the_guard_with_what_to_do(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openclaw_trl.errors import UserError
    from openclaw_trl.trainer import OpenClawTrainer

    config = OpenClawConfig(
        output_dir=str(tmp_path / "run"),
        report_to="none",
        batch_size=2,
        save_strategy="no",
        adapter_history=0,
    )
    with pytest.raises(UserError, match="set guard: false"):
        OpenClawTrainer(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            args=config,
            store=Store(tmp_path / "s.sqlite"),
            processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        )


def test_the_one_forward_comparison_equals_plain_forwards(tiny_model_dir, tmp_path):
    """The guard's comparison (the candidate over every row in forwards grouped by length, the base's side
    kept from the first check) gives what separate plain forwards give: per row the KL to the plain base, or (a
    hinted row past the bound) the smaller of that and the KL to the even mixture of the plain and the hinted
    base."""
    store = Store(tmp_path / "store.sqlite")
    for s in sampled(tiny_model_dir, 4, hint=True):
        store.queue.add_sample(s)
    trainer = make_trainer(tiny_model_dir, tmp_path, store, max_steps=1, learning_rate=0.05)
    trainer.train()
    rows = [
        ProbeRow(tuple(range(5, 12)), tuple(range(5, 15)), (20, 21, 22, 23, 24), "recent"),
        ProbeRow((7, 8), (7, 8), (30, 31), "recent"),  # no hint: its reference prompt is its prompt
        ProbeRow((9, 10, 11), (9, 10, 11, 12), (40, 41, 42), "neutral"),
    ]
    from openclaw_trl.trainer.safety import _inference

    model = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad(), _inference(model):
        loose = trainer._compare(rows)
        trainer.guard.config = dataclasses.replace(trainer.guard.config, max_kl=1e-12)
        tight = trainer._compare(rows)  # every hinted row is also compared with the mixture
        again = trainer._compare(rows)  # the base's side (plain and mixed) from the cache
        candidate, mask = trainer._reply_distributions(model, rows)
        with model.disable_adapter():
            plain, _ = trainer._reply_distributions(model, rows)
            hinted, _ = trainer._reply_distributions(model, rows, reference_from=0)

    def row_kl(reference):
        return ((candidate.exp() * (candidate - reference)).sum(-1) * mask).sum(-1) / mask.sum(-1)

    def row_implausible(reference):
        tail = reference < IMPLAUSIBLE_LOGP
        return (((candidate.exp() - reference.exp()) * tail).sum(-1) * mask).amax(-1)

    to_plain = row_kl(plain)
    to_mixture = row_kl(torch.logsumexp(torch.stack([plain, hinted]), dim=0) - math.log(2.0))
    told = torch.tensor([True, False, True])
    entropy = (-(candidate.exp() * candidate).sum(-1) * mask).sum() / mask.sum()
    assert loose.kl == pytest.approx(float(to_plain.max()), abs=1e-5) and loose.kl > 1e-4
    best = torch.where(told, torch.minimum(to_plain, to_mixture), to_plain)
    mixture = torch.logsumexp(torch.stack([plain, hinted]), dim=0) - math.log(2.0)
    moved = torch.where(
        told, torch.minimum(row_implausible(plain), row_implausible(mixture)), row_implausible(plain)
    )
    for found in (tight, again):
        assert found.positions == int(mask.sum()) == 10
        assert found.kl == pytest.approx(float(best.max()), abs=1e-5)
        assert found.implausible == pytest.approx(float(moved.max()), abs=1e-5)
        assert found.entropy_candidate == pytest.approx(float(entropy), abs=1e-5)


def _perturbed(trainer, seed: int) -> None:
    """A new candidate version: the adapter's weights moved at random."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in _trainable(trainer):
            p.add_(0.05 * torch.randn(p.shape, generator=generator))


def _same(found: Comparison, expected: Comparison) -> bool:
    return dataclasses.astuple(found) == pytest.approx(dataclasses.astuple(expected), abs=1e-5)


def _trainable(trainer) -> list[torch.Tensor]:
    model = trainer.accelerator.unwrap_model(trainer.model)
    return [p for p in model.parameters() if p.requires_grad]


def test_the_kept_reference_gives_the_signals_of_a_fresh_one_and_follows_the_rows_and_hints(
    tiny_model_dir, tmp_path
):
    """The base's side of a row is computed once and reused for the next versions: their signals equal those
    of a fresh computation. A changed row (a new reply), a changed hint or another temperature computes a new
    reference; references of rows no longer checked are dropped."""
    from openclaw_trl.trainer.guard_reference import ReferenceCache
    from openclaw_trl.trainer.safety import _inference

    trainer = make_trainer(tiny_model_dir, tmp_path, Store(tmp_path / "store.sqlite"))
    rows = [
        ProbeRow(tuple(range(5, 12)), tuple(range(5, 15)), (20, 21, 22, 23, 24), "recent"),
        ProbeRow((7, 8), (7, 8), (30, 31), "recent"),
        ProbeRow((9, 10, 11), (9, 10, 11, 12), (40, 41, 42), "neutral"),
    ]
    model = trainer.accelerator.unwrap_model(trainer.model)

    def fresh(rows):
        kept, trainer._references = trainer._references, ReferenceCache()
        try:
            return trainer._compare(rows)
        finally:
            trainer._references = kept

    with torch.no_grad(), _inference(model):
        _perturbed(trainer, 0)
        trainer._compare(rows)
        cache = trainer._references
        assert cache.computed == len(cache) == 3  # the plain base of each row; every row within the bounds
        for seed in (1, 2):  # two more versions: nothing recomputed, the same signals as from scratch
            _perturbed(trainer, seed)
            assert _same(trainer._compare(rows), fresh(rows))
            assert cache.computed == 3

        trainer.guard.config = dataclasses.replace(trainer.guard.config, max_kl=1e-12)
        tight = trainer._compare(rows)  # the two hinted rows are now also compared with the mixture
        assert cache.computed == len(cache) == 5
        assert trainer._compare(rows) == tight and _same(tight, fresh(rows))
        assert cache.computed == 5

        hinted = dataclasses.replace(rows[0], reference_ids=tuple(range(5, 17)))  # a new hint: a new mixture
        assert _same(trainer._compare([hinted, *rows[1:]]), fresh([hinted, *rows[1:]]))
        assert cache.computed == 6 and len(cache) == 5

        replied = dataclasses.replace(rows[1], reply_ids=(30, 31, 32))  # a new turn: a new plain reference
        changed = [hinted, replied, rows[2]]
        assert _same(trainer._compare(changed), fresh(changed))
        assert cache.computed == 7 and len(cache) == 5  # the old row's reference dropped

        trainer._compare(rows[2:])  # fewer rows: only theirs are kept
        assert cache.computed == 7 and len(cache) == 2
        trainer.temperature = trainer.temperature * 2
        assert _same(trainer._compare(rows[2:]), fresh(rows[2:]))
        assert cache.computed == 9 and len(cache) == 2


def test_the_reference_is_told_the_persons_recent_hints():
    """The reference prompt is the row's prompt with the person's most recent distinct hints appended (the
    OPD teacher's context); before any hint it is the prompt itself; short replies are left out."""
    from types import SimpleNamespace

    from openclaw_trl import judge

    rendered = []

    def render(messages, tools):
        rendered.append(messages)
        return list(range(len(str(messages))))

    long_reply = SimpleNamespace(
        prompt_messages=[{"role": "user", "content": "Tell me about apples."}],
        tools=None,
        prompt_ids=[1, 2, 3],
        completion_ids=list(range(30)),
    )
    short_reply = SimpleNamespace(**{**vars(long_reply), "completion_ids": [5, 6]})
    hints = []
    guard = VersionGuard(
        GuardConfig(neutral_prompts=()),
        render=render,
        recent_turns=lambda n: [short_reply, long_reply],
        recent_hints=lambda n: list(hints),
    )
    (row,) = guard.rows(lambda prompts, n, seed: pytest.fail("no neutral prompt"))
    assert row.reference_ids == row.prompt_ids == (1, 2, 3) and len(row.reply_ids) == 24
    hints[:] = ["Use bullets.", "Be brief.", "Use bullets."]
    assert guard.hint() == "Be brief.\nUse bullets."
    (row,) = guard.rows(lambda prompts, n, seed: [])
    assert rendered[-1] == judge.append_hint(long_reply.prompt_messages, "Be brief.\nUse bullets.")
    assert row.prompt_ids == (1, 2, 3) and row.reference_ids != row.prompt_ids
