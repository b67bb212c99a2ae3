"""group_advantages: GRPO normalisation over the subset or the pool, and its edge cases."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods_rl import group_advantages


def test_subset_statistics_with_unbiased_std():
    rewards = torch.tensor([[1.0, 0.0, 0.5, 0.25], [2.0, 4.0, 4.0, 6.0]])
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)  # torch.std default: unbiased
    expected = (rewards - mean) / (std + 1e-4)
    torch.testing.assert_close(group_advantages(rewards), expected)
    torch.testing.assert_close(group_advantages(rewards, eps=0.5), (rewards - mean) / (std + 0.5))
    torch.testing.assert_close(group_advantages(rewards, scale="none"), rewards - mean)


def test_pool_statistics():
    pool = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0, 2.0, 5.0]])
    rewards = pool[:, [0, 1, 5]]
    mean, std = pool.mean(dim=1, keepdim=True), pool.std(dim=1, keepdim=True)
    torch.testing.assert_close(group_advantages(rewards, pool=pool), (rewards - mean) / (std + 1e-4))
    torch.testing.assert_close(group_advantages(rewards, scale="none", pool=pool), rewards - mean)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("value", [0.1, 1.0, -3.7, 3e4 + 0.1, 1e6 + 0.1])
def test_equal_rewards_give_exact_zeros(dtype, value):
    if value > torch.finfo(dtype).max:
        pytest.skip("overflows float16")
    rewards = torch.full((2, 7), value, dtype=dtype)
    for scale, eps in (("std", 1e-4), ("std", 0.0), ("none", 1e-4)):
        advantages = group_advantages(rewards, scale=scale, eps=eps)
        assert advantages.dtype == dtype
        assert (advantages == 0).all()
        assert (group_advantages(rewards[:, :3], scale=scale, eps=eps, pool=rewards) == 0).all()


def test_group_of_one_gives_zero_not_nan():
    rewards = torch.tensor([[0.3], [1.0]])
    for scale in ("std", "none"):
        assert (group_advantages(rewards, scale=scale) == 0).all()
    pool = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    torch.testing.assert_close(
        group_advantages(rewards, scale="none", pool=torch.tensor([[0.3], [2.0]])),
        torch.tensor([[0.0], [-1.0]]),
    )
    assert torch.isfinite(group_advantages(rewards, pool=pool)).all()


def test_large_offset_keeps_precision():
    noise = torch.tensor([[0.0, 0.25, 0.5, 1.0]])
    torch.testing.assert_close(group_advantages(noise + 1e6), group_advantages(noise))


def test_mask_makes_groups_of_different_sizes():
    nan = float("nan")
    rewards = torch.tensor([[1.0, nan, 0.0, 0.5], [nan, nan, nan, nan], [2.0, 4.0, nan, 9.0]])
    mask = ~torch.isnan(rewards)
    mask[2, 3] = False  # a valid reward left out of its group
    advantages = group_advantages(rewards, mask=mask)
    torch.testing.assert_close(advantages[0, mask[0]], group_advantages(torch.tensor([[1.0, 0.0, 0.5]]))[0])
    torch.testing.assert_close(advantages[2, :2], group_advantages(torch.tensor([[2.0, 4.0]]))[0])
    assert (advantages[~mask] == 0).all()
    pool = torch.tensor([[1.0, 1.0, 0.0, 0.0]]).repeat(3, 1)
    with_pool = group_advantages(rewards, mask=mask, pool=pool, scale="none")
    torch.testing.assert_close(with_pool[mask], rewards[mask] - 0.5)
    assert (with_pool[~mask] == 0).all()


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 12).flatmap(
        lambda m: st.lists(st.lists(st.floats(-1e3, 1e3), min_size=m, max_size=m), min_size=1, max_size=4)
    )
)
def test_advantages_are_centred_with_unit_std(rows):
    rewards = torch.tensor(rows, dtype=torch.float64)
    advantages = group_advantages(rewards, eps=0.0)
    spread = rewards.amax(dim=1) - rewards.amin(dim=1)
    varied = spread > 1e-6 * rewards.abs().amax(dim=1).clamp(min=1.0)
    torch.testing.assert_close(advantages.mean(dim=1), torch.zeros(len(rows), dtype=torch.float64))
    torch.testing.assert_close(advantages.std(dim=1)[varied], torch.ones(int(varied.sum()), dtype=torch.float64))
    assert (advantages[spread == 0] == 0).all()


@pytest.mark.parametrize(
    ("rewards", "kwargs", "message"),
    [
        (torch.zeros(4), {}, "rewards must be a 2-D"),
        (torch.zeros(2, 4, dtype=torch.int64), {}, "rewards must be a 2-D .* floating-point"),
        ([[0.0, 1.0]], {}, "rewards must be a 2-D"),
        (torch.zeros(2, 0), {}, "at least one rollout"),
        (torch.zeros(2, 4), {"scale": "mad"}, "unknown scale 'mad'"),
        (torch.zeros(2, 4), {"eps": -1.0}, "eps must be >= 0"),
        (torch.zeros(2, 4), {"pool": torch.zeros(3, 8)}, "pool has 3 groups but rewards have 2"),
        (torch.zeros(2, 4), {"pool": torch.zeros(8)}, "pool must be a 2-D"),
        (torch.zeros(2, 4), {"mask": torch.ones(2, 3, dtype=torch.bool)}, "mask must be a bool tensor of shape"),
        (torch.zeros(2, 4), {"mask": torch.ones(2, 4)}, "mask must be a bool tensor of shape"),
    ],
)
def test_bad_arguments(rewards, kwargs, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, **kwargs)
