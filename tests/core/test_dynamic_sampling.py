"""Dynamic sampling's rules against a brute-force simulation of the rounds on fixed reward sequences."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods_rl.core.dynamic_sampling import TOLERANCE, another_round_needed, informative_groups, plan_groups

NAN = math.nan


def test_informative_means_two_scorable_scores_apart_by_more_than_the_tolerance():
    scores = torch.tensor(
        [
            [1.0, 1.0, 1.0],  # all equal
            [1.0, 1.0 + TOLERANCE / 2, 1.0],  # equal within the tolerance
            [1.0, 1.0 + 2 * TOLERANCE, 1.0],  # apart
            [0.0, NAN, 1.0],  # apart, one unscorable
            [0.0, NAN, NAN],  # a single scorable rollout
            [NAN, NAN, NAN],  # none
            [2.0, 2.0, NAN],  # equal, one unscorable
        ],
        dtype=torch.float64,
    )
    assert informative_groups(scores).tolist() == [False, False, True, True, False, False, False]


def simulate(rewards: list[list[list[list[float]]]], max_rounds: int) -> tuple[int, list[list[tuple[int, int]]]]:
    """The rounds, in plain loops: `rewards[round][process][group]` lists a group's rollout rewards. Returns the
    rounds run and each process's (round, group) slots."""
    processes, groups = len(rewards[0]), len(rewards[0][0])

    def informative(values: list[float]) -> bool:
        scorable = [v for v in values if not math.isnan(v)]
        return len(scorable) >= 2 and max(scorable) - min(scorable) > TOLERANCE

    rounds = 0
    while True:
        rounds += 1
        counts = [
            sum(informative(rewards[r][p][g]) for r in range(rounds) for g in range(groups)) for p in range(processes)
        ]
        if min(counts) >= groups or rounds == max_rounds or rounds == len(rewards):
            break
    slots = []
    for p in range(processes):
        kept = [(r, g) for r in range(rounds) for g in range(groups) if informative(rewards[r][p][g])][:groups]
        last = rounds - 1
        dropped = [(last, g) for g in range(groups) if not informative(rewards[last][p][g])]
        slots.append(kept + dropped[: groups - len(kept)])
    return rounds, slots


@st.composite
def reward_sequences(draw):
    """Up to 5 rounds of P <= 3 processes x G <= 3 groups of n <= 3 rewards, from few values so that ties are common."""
    processes, groups, n = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(2, 3))
    value = st.sampled_from([0.0, 1.0, NAN])
    group = st.lists(value, min_size=n, max_size=n)
    block = st.lists(st.lists(group, min_size=groups, max_size=groups), min_size=processes, max_size=processes)
    return draw(st.lists(block, min_size=1, max_size=5)), draw(st.integers(1, 6))


@settings(max_examples=300, deadline=None)
@given(reward_sequences())
def test_rounds_and_kept_groups_match_brute_force(case):
    rewards, max_rounds = case
    expected_rounds, expected_slots = simulate(rewards, max_rounds)
    masks = []
    for round_rewards in rewards:  # as the trainer runs it: one more round while the rule asks for one
        scores = torch.tensor(round_rewards, dtype=torch.float64)  # (P, G, n)
        masks.append(informative_groups(scores.flatten(0, 1)).view(scores.shape[:2]))
        if not another_round_needed(masks, max_rounds):
            break
    assert len(masks) == expected_rounds
    plan = plan_groups(masks)
    assert plan.shape == (len(rewards[0]), len(rewards[0][0]), 2)  # every process keeps exactly G groups
    assert [[tuple(slot) for slot in slots] for slots in plan.tolist()] == expected_slots


def test_a_full_process_waits_for_a_short_one():
    full, short = torch.tensor([[True, True], [False, False]]), torch.tensor([[True, False], [False, True]])
    assert another_round_needed([full], max_rounds=3)
    assert not another_round_needed([full, short], max_rounds=2)  # the limit, though process 1 is still short
    # Process 0 keeps its first round; process 1 its only informative group, filled with the last round's dropped.
    assert plan_groups([full, short]).tolist() == [[[0, 0], [0, 1]], [[1, 1], [1, 0]]]
