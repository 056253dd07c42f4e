"""losses.py against hand-computed values: signs, masking, and finite output on edge cases."""

import math

import pytest
import torch

from openclaw_trl.losses import combined_advantages, masked_mean, topk_distillation_loss


def _adv(**kw):
    base = dict(
        rewards=torch.tensor([1.0, -1.0]),
        teacher_logprobs=torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.2, -0.3]]),
        old_logprobs=torch.tensor([[-1.0, -1.0, -1.0], [-0.4, -0.2, -0.1]]),
        response_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
        opd_mask=torch.tensor([True, True]),
    )
    base.update(kw)
    return combined_advantages(**base)


def test_combine_hand_computed():
    adv = _adv(w_rl=1.0, w_opd=1.0)
    expected = torch.tensor([[1.0 + 0.5, 1.0 + 0.0, 0.0], [-1.0 + 0.3, -1.0 + 0.0, -1.0 - 0.2]])
    torch.testing.assert_close(adv, expected)


def test_weights_select_methods():
    rl = _adv(w_rl=1.0, w_opd=0.0)
    torch.testing.assert_close(rl, torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]]))
    opd = _adv(w_rl=0.0, w_opd=1.0)
    torch.testing.assert_close(opd, torch.tensor([[0.5, 0.0, 0.0], [0.3, 0.0, -0.2]]))
    scaled = _adv(w_rl=0.5, w_opd=2.0)
    torch.testing.assert_close(scaled, torch.tensor([[1.5, 0.5, 0.0], [0.1, -0.5, -0.9]]))


def test_teacher_better_than_student_gives_positive_advantage():
    # lp_T > lp_old: the teacher (with the hint) likes the token more -> push it up.
    adv = _adv(rewards=torch.zeros(2), w_rl=0.0)
    assert adv[0, 0] > 0 and adv[1, 2] < 0


def test_opd_mask_off_is_exactly_zero_even_with_garbage():
    garbage = torch.tensor([[float("nan"), float("inf"), -float("inf")], [1e30, float("nan"), 3.0]])
    adv = _adv(teacher_logprobs=garbage, opd_mask=torch.tensor([False, False]))
    torch.testing.assert_close(adv, torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]]))
    # Mixed: only the masked row is protected.
    adv = _adv(
        teacher_logprobs=torch.tensor([[float("nan")] * 3, [-0.1, -0.2, -0.3]]),
        opd_mask=torch.tensor([False, True]),
    )
    assert torch.isfinite(adv).all()
    torch.testing.assert_close(adv[1], torch.tensor([-0.7, -1.0, -1.2]))


def test_padding_is_zero_and_output_detached():
    old = torch.tensor([[-1.0, -1.0, -1.0], [-0.4, -0.2, -0.1]], requires_grad=True)
    adv = _adv(old_logprobs=old, teacher_logprobs=torch.tensor([[0.0, 0.0, float("nan")], [0.0, 0.0, 0.0]]))
    assert adv[0, 2] == 0.0
    assert not adv.requires_grad


def test_empty_response():
    adv = combined_advantages(
        torch.tensor([1.0]), torch.zeros(1, 0), torch.zeros(1, 0), torch.zeros(1, 0), torch.tensor([True])
    )
    assert adv.shape == (1, 0)


def _kl_by_hand(student_probs, teacher_probs):
    s = list(student_probs) + [1.0 - sum(student_probs)]
    t = list(teacher_probs) + [1.0 - sum(teacher_probs)]
    return sum(p * (math.log(p) - math.log(q)) for p, q in zip(s, t) if p > 0)


def test_topk_kl_hand_computed():
    s = [0.5, 0.2]
    t = [0.3, 0.4]
    student = torch.tensor([[[math.log(p) for p in s]]])
    teacher = torch.tensor([[[math.log(p) for p in t]]])
    kl = topk_distillation_loss(student, teacher, torch.ones(1, 1))
    assert kl.shape == (1, 1)
    assert kl.item() == pytest.approx(_kl_by_hand(s, t), rel=1e-5)


def test_topk_kl_zero_when_equal_and_masked():
    lp = torch.log_softmax(torch.randn(2, 3, 10), -1)[..., :4]
    kl = topk_distillation_loss(lp, lp.clone(), torch.ones(2, 3))
    torch.testing.assert_close(kl, torch.zeros(2, 3), atol=1e-6, rtol=0)
    other = torch.log_softmax(torch.randn(2, 3, 10), -1)[..., :4]
    mask = torch.tensor([[1, 0, 1], [0, 0, 0]])
    kl = topk_distillation_loss(lp, other, mask)
    assert (kl[mask == 0] == 0).all() and (kl[mask == 1] > 0).all()


def test_topk_kl_is_reverse_kl_direction():
    # D(student || teacher) is what we want (mode seeking): swapping arguments changes the value.
    s, t = [0.7, 0.2], [0.2, 0.7]
    ls, lt = torch.tensor([[[math.log(p) for p in s]]]), torch.tensor([[[math.log(p) for p in t]]])
    s2, t2 = [0.9, 0.05], [0.5, 0.3]
    ls2, lt2 = torch.tensor([[[math.log(p) for p in s2]]]), torch.tensor([[[math.log(p) for p in t2]]])
    assert topk_distillation_loss(ls2, lt2, torch.ones(1, 1)).item() == pytest.approx(
        _kl_by_hand(s2, t2), rel=1e-5
    )
    assert topk_distillation_loss(ls, lt, torch.ones(1, 1)).item() == pytest.approx(
        _kl_by_hand(s, t), rel=1e-5
    )
    assert _kl_by_hand(s2, t2) != pytest.approx(_kl_by_hand(t2, s2), rel=1e-3)


def test_topk_gradient_only_into_student():
    student = torch.log_softmax(torch.randn(1, 2, 6), -1)[..., :3].clone().requires_grad_(True)
    teacher = torch.log_softmax(torch.randn(1, 2, 6), -1)[..., :3].clone().requires_grad_(True)
    topk_distillation_loss(student, teacher, torch.ones(1, 2)).sum().backward()
    assert student.grad is not None and torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0
    assert teacher.grad is None


def test_topk_edge_cases_are_finite():
    # K covers all the mass (sum p == 1): tail bin must not be log(0) = -inf -> NaN.
    full = torch.log_softmax(torch.randn(1, 2, 5), -1)
    kl = topk_distillation_loss(full.clone().requires_grad_(True), full.flip(-1), torch.ones(1, 2))
    assert torch.isfinite(kl).all()
    # -inf log-probs on either side, and rounding pushing the mass above 1.
    student = torch.tensor([[[-float("inf"), math.log(0.5)], [0.0, 0.0]]], requires_grad=True)
    teacher = torch.tensor([[[math.log(0.5), -float("inf")], [math.log(0.6), math.log(0.6)]]])
    kl = topk_distillation_loss(student, teacher, torch.ones(1, 2))
    assert torch.isfinite(kl).all()
    kl.sum().backward()
    assert torch.isfinite(student.grad).all()
    # Empty response.
    assert topk_distillation_loss(torch.zeros(2, 0, 4), torch.zeros(2, 0, 4), torch.zeros(2, 0)).shape == (
        2,
        0,
    )


def test_topk_cap_bounds_the_loss():
    student = torch.log(torch.tensor([[[0.98, 0.01]]]))
    teacher = torch.log(torch.tensor([[[0.001, 0.9]]]))
    uncapped = topk_distillation_loss(student, teacher, torch.ones(1, 1))
    assert uncapped.item() > 2.0
    assert topk_distillation_loss(student, teacher, torch.ones(1, 1), cap=2.0).item() == pytest.approx(2.0)


def test_masked_mean():
    v = torch.tensor([[1.0, 2.0, 100.0]])
    assert masked_mean(v, torch.tensor([[1, 1, 0]])).item() == pytest.approx(1.5)
    assert masked_mean(v, torch.zeros(1, 3)).item() == 0.0
