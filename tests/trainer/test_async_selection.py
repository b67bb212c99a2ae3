"""PODS's selection one group at a time, as an asynchronous trainer's rollout worker scores groups: exactly the
synchronous trainer's stages on the whole batch, dynamic sampling bounded per policy version, and TRL's own group
scoring (`_AsyncRolloutLoop._score_group`) followed by the selection queues only the selected rows."""

import asyncio
import math

import numpy as np
import pytest
import torch

from pods_rl.config_rules import check_async_fields
from pods_rl.trainer import stages
from pods_rl.trainer.async_selection import GroupSelection, rewards_of, take_rows


def settings(rule="max_variance", m=2, scale="group", stats="selected", tie_break="index") -> stages.SelectionSettings:
    return stages.SelectionSettings(
        num_selected=m,
        rule=rule,
        budget="per_prompt",
        tie_break=tie_break,
        rows_per_process=m,
        aggregation="sum_then_normalize",
        scale=scale,
        advantage_stats=stats,
    )


def batch_selection(rewards, tokens, weights, chosen, generator=None):
    """The synchronous trainer's stages on all G groups at once: (G, n) selected mask and (G * n,) advantages."""
    groups, n = tokens.shape
    layout = torch.arange(groups * n).view(groups, n)
    pools = stages.lay_out(rewards, layout, tokens.flatten(), torch.zeros(groups * n, dtype=torch.bool), weights,
                           chosen.aggregation)  # fmt: skip
    selected = stages.select(pools, chosen, generator)
    return selected, stages.advantages(pools, selected, weights, chosen)


@pytest.mark.parametrize(
    "chosen",
    [
        settings(),
        settings(m=3, scale="none"),
        settings(stats="pool"),
        settings(rule="max_reward", m=3),
        settings(rule="random"),
        settings(tie_break="shortest", m=3),
    ],
    ids=["max-variance", "unscaled-m3", "pool-stats", "max-reward", "random", "shortest"],
)
def test_one_group_at_a_time_equals_the_batch_stages(chosen):
    """Rewards of two functions (one sometimes None), on 40 groups of 6: the rows kept and their advantages per
    group are the whole batch's, exactly (the random rule draws one per group, in order, from equal generators)."""
    rng = np.random.default_rng(0)
    groups, n = 40, 6
    rewards = torch.tensor(rng.integers(0, 3, size=(groups * n, 2)) / 2, dtype=torch.float64)
    rewards[rng.random(groups * n) < 0.1, 1] = torch.nan
    rewards[:n] = 1.0  # an all-equal group
    tokens = torch.tensor(rng.integers(1, 9, size=(groups, n)))
    weights = torch.tensor([1.0, 0.5], dtype=torch.float64)
    selected, advantages = batch_selection(rewards, tokens, weights, chosen, torch.Generator().manual_seed(7))
    selection = GroupSelection(chosen, weights, generator=torch.Generator().manual_seed(7))
    for g in range(groups):
        choice = selection.choose(rewards[g * n : (g + 1) * n], tokens[g].tolist())
        assert choice.kept == selected[g].nonzero().squeeze(1).tolist()
        assert choice.advantages == advantages[g * n : (g + 1) * n][selected[g]].tolist()
        assert len(choice.kept) == chosen.num_selected and not choice.dropped


def test_dynamic_sampling_drops_equal_groups_up_to_its_bound_per_policy_version():
    weights = torch.ones(1, dtype=torch.float64)
    selection = GroupSelection(settings(), weights, dynamic_sampling=True, drop_limit=2)
    equal, varied = torch.ones(4, 1, dtype=torch.float64), torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    tokens = [3, 3, 3, 3]
    assert not selection.choose(varied, tokens, version=0).dropped
    assert [selection.choose(equal, tokens, version=0).dropped for _ in range(3)] == [True, True, False]
    kept = selection.choose(equal, tokens, version=0)  # past the bound: kept, and it trains nothing
    assert len(kept.kept) == 2 and kept.advantages == [0.0, 0.0] and kept.metrics["pods/groups_dropped"] == 0.0
    assert selection.choose(equal, tokens, version=1).dropped  # a new policy version, a new bound
    assert selection.dropped_by_version == {0: 2, 1: 1}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"selection_budget": "batch"}, "selection_budget='batch' cannot apply to asynchronous training"),
        ({"rollout_allocation": "history"}, "rollout_allocation='history' cannot apply"),
        ({"scale_rewards": "batch"}, "scale_rewards='batch' cannot apply"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "'normalize_then_sum' cannot apply"),
    ],
)
def test_what_needs_several_groups_is_refused_in_one_line(fields, message):
    with pytest.raises(ValueError, match=message):
        check_async_fields(fields, section="trainer.")
    check_async_fields({"scale_rewards": "none", "selection_rule": "random", "dynamic_sampling": True})


# ------------------------------------------------------------------ TRL's group scoring, then the selection


def correct(completions, **kwargs):
    """A reward function as the worker calls it (module level: it is pickled into the worker's process)."""
    return [1.0 if "4" in completion[0]["content"] else 0.0 for completion in completions]


def short(completions, **kwargs):
    return [None if "x" in completion[0]["content"] else 0.1 for completion in completions]


def bare_loop(cls):
    """A rollout loop object with only what scoring reads: the two reward functions, no environments."""
    loop = object.__new__(cls)
    loop.reward_funcs, loop.reward_func_names = [correct, short], ["correct", "short"]
    loop._env_reward_types, loop._provides_rollout_reward = [], False
    return loop


def scored_group(texts, rows_per_completion, version=3):
    """TRL's real `_score_group` on a hand-built group: a loop object with only what scoring reads."""
    from accelerate import PartialState
    from trl.experimental.async_grpo.async_rollout_worker import (
        RolloutGroup,
        TrainingSequence,
        _AsyncRolloutLoop,
    )

    PartialState()  # TRL's logger needs accelerate's state, as the worker's process has it
    loop = bare_loop(_AsyncRolloutLoop)
    sequences = [
        [TrainingSequence([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], rollout_id=0)] * rows for rows in rows_per_completion
    ]
    group = RolloutGroup(
        prompts=[[{"role": "user", "content": "2+2?"}]] * len(texts),
        reward_kwargs={},
        completions=[[{"role": "assistant", "content": text}] for text in texts],
        completions_ids=[[7] * len(text) for text in texts],
        completions_sequences=sequences,
        tool_call_counts=[0] * len(texts),
        tool_failure_counts=[0] * len(texts),
        model_version=version,
        group_id=11,
        env_rewards=[None] * len(texts),
        rollout_rewards=[None] * len(texts),
    )
    return group, asyncio.run(loop._score_group(group))


def test_trls_scored_samples_keep_the_selected_rows_with_pods_advantages():
    """TRL scores 4 completions (one forks into 2 training rows); the selection keeps 2, every row of each, with the
    stages' advantages on the weighted rewards, not TRL's population-std ones."""
    texts = ["4", "5", "44", "x"]
    rows = [1, 2, 1, 1]
    group, samples = scored_group(texts, rows)
    assert len(samples) == 5
    names = ["correct", "short"]
    rewards = rewards_of(samples, rows, names)
    assert rewards[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0] and math.isnan(rewards[3, 1])
    weights = torch.tensor([1.0, 2.0], dtype=torch.float64)
    selection = GroupSelection(settings(), weights)
    tokens = [len(text) for text in texts]
    choice = selection.choose(rewards, tokens, group.model_version)  # as the worker's _score_group does
    queued = take_rows(choice, samples, rows)
    expected = selection.choose(rewards, tokens)  # a fresh, deterministic choice on the same rewards
    assert choice.kept == expected.kept and choice.advantages == expected.advantages
    assert [s.completion[0]["content"] for s in queued] == [texts[i] for i in choice.kept for _ in range(rows[i])]
    per_row = [a for i, a in zip(choice.kept, choice.advantages, strict=True) for _ in range(rows[i])]
    assert [s.advantage for s in queued] == per_row
    assert all(s.group_id == 11 and s.model_version == 3 for s in queued)
    assert queued[0].metrics["pods/rollouts_generated"] == 4.0 and queued[0].metrics["pods/rollouts_trained"] == 2.0


def test_a_group_dynamic_sampling_drops_queues_nothing():
    group, samples = scored_group(["5", "6", "7", "8"], [1, 1, 1, 1])
    selection = GroupSelection(settings(), torch.ones(2, dtype=torch.float64), dynamic_sampling=True, drop_limit=1)
    choice = selection.choose(rewards_of(samples, [1] * 4, ["correct", "short"]), [1] * 4, group.model_version)
    queued = take_rows(choice, samples, [1] * 4)
    assert queued == [] and choice.dropped and selection.dropped_by_version == {3: 1}


def test_rewards_are_read_back_per_completion_or_refused():
    _, samples = scored_group(["4", "5"], [2, 1])
    with pytest.raises(ValueError, match="3 samples for 2 rows of 2 completions"):
        rewards_of(samples, [1, 1], ["correct", "short"])


def test_the_worker_loop_queues_the_selected_rows_and_counts_what_it_dropped(tmp_path):
    """`PODSRolloutLoop._score_group` is TRL's scoring then the selection, with the worker's counters and one record
    line per scored group; its settings travel as plain data (pickled into the worker's process)."""
    import pickle
    from collections import defaultdict

    from pods_rl.trainer.async_worker import PODSRolloutLoop, group_selection, read_group_records, selection_kwargs

    record = tmp_path / "groups.jsonl"
    data = selection_kwargs(settings(), [1.0, 1.0], dynamic_sampling=True, drop_limit=5, seed=0, record=str(record))
    assert pickle.loads(pickle.dumps(data)) == data
    loop = bare_loop(PODSRolloutLoop)
    loop._selection, loop._counters = group_selection(data), defaultdict(float)
    loop._record, loop._start = data["record"], 40
    varied, _ = scored_group(["4", "5", "4", "6"], [1, 1, 1, 1])
    equal, _ = scored_group(["5", "6", "7", "8"], [1, 1, 1, 1])
    kept = asyncio.run(loop._score_group(varied))  # rewards 1.1, 0.1, 1.1, 0.1: one right and one wrong kept
    assert sorted("4" in s.completion[0]["content"] for s in kept) == [False, True]
    spread = 0.5 / (math.sqrt(0.5) + 1e-4)  # (reward - mean) / (unbiased std of the two + 1e-4)
    assert sorted(s.advantage for s in kept) == [pytest.approx(-spread), pytest.approx(spread)]
    assert asyncio.run(loop._score_group(equal)) == []
    assert dict(loop._counters) == {
        "pods/groups_scored_total": 2.0,
        "pods/rollouts_generated_total": 8.0,
        "pods/groups_dropped_total": 1.0,
    }
    first, second = read_group_records(record)
    assert (first["start"], first["version"], first["dropped"], second["dropped"]) == (40, 3, False, True)
    assert first["rewards"] == [[1.0, 0.1], [0.0, 0.1], [1.0, 0.1], [0.0, 0.1]] and first["tokens"] == [1, 1, 1, 1]
    assert len(first["kept"]) == 2 and sorted(first["advantages"]) == [pytest.approx(-spread), pytest.approx(spread)]
    assert (second["kept"], second["advantages"]) == ([], [])


@pytest.mark.parametrize("unseeded", [True, False])
def test_the_worker_drops_trls_request_seed_only_for_a_cpu_server(monkeypatch, unseeded):
    """vLLM's CPU worker dies rewinding a seeded request's generator: there the loop sends requests unseeded."""
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    from pods_rl.trainer.async_worker import PODSRolloutLoop

    sent = []

    async def post(self, path, payload, timeout, max_retries=3):
        sent.append((path, payload, timeout, max_retries))
        return {}

    monkeypatch.setattr(_AsyncRolloutLoop, "_post", post)
    loop = bare_loop(PODSRolloutLoop)
    loop._unseeded = unseeded
    asyncio.run(loop._post("/v1/completions", {"prompt": [1, 2], "seed": 7}, 30.0, 5))
    expected = {"prompt": [1, 2]} if unseeded else {"prompt": [1, 2], "seed": 7}
    assert sent == [("/v1/completions", expected, 30.0, 5)]
