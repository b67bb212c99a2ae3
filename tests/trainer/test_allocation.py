"""Rollout allocation in PODSTrainer (`pods_rl.trainer.allocated`): the prompts each process trains, the rollouts
generated and the pool sizes, against a plain simulation of the documented rules, on 1 and 2 processes.

`support.run_allocation`: `flagged_dataset` in order, n = 4, m = 2, `position_rollouts` and `flag_reward` (a `v`
prompt's rows of one call vary, a `c` prompt's are all 1). Resume is tested with the other paths in test_resume.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support import fast_args, make_trainer, run_allocation, run_launched, two_process_launch, vowel_reward

from pods_rl.core.allocation import PassRateHistory, plan_from_history, prompt_id
from pods_rl.core.dynamic_sampling import another_round_needed

SCRIPT = Path(__file__).with_name("allocation_run.py")
N, M = 4, 2
FLAGS = "100000001101"  # 1 process, 2 prompts per generation
TWO_PROCESS_FLAGS = "1100110100001010"  # 2 processes, 2 prompts each per generation
HISTORY = dict(rollout_allocation="history", max_rollouts_per_prompt=6, history_exploration=0.2, max_steps=8)
BUDGET = 10  # rollouts per process and generation: 2 prompts of 2..6


def name(i: int, flags: str) -> str:
    return ("v" if flags[i] == "1" else "c") + f"{i:02d}="


def batches(flags: str, size: int) -> list[list[int]]:
    return [list(range(start, start + size)) for start in range(0, len(flags) - size + 1, size)]


def simulate_screen(
    flags: str, processes: int, groups: int, k: int, max_rounds: int, steps: int, dynamic_sampling: bool = False
) -> list[dict]:
    """Per step: each process's trained prompts and pool sizes, the rounds and the rollouts generated, by the rules:
    candidates in data order, a screen passes when it varies (a `v` prompt), the first G that pass are trained, then
    the others in order; every process extends the most that passed on any process. With dynamic sampling, such
    screening steps repeat on further data while a process trains a pool that does not vary (a `c` prompt), and the
    first G varying pools of the rounds are trained, filled with the last round's others."""
    data, position, result = batches(flags, processes * groups), 0, []

    def screen_step() -> dict:
        nonlocal position
        rounds: list[list[int]] = []
        while True:
            rounds.append(data[position])
            position += 1
            candidates = [[i for r in rounds for i in r[p * groups : (p + 1) * groups]] for p in range(processes)]
            passed = [[i for i in c if flags[i] == "1"] for c in candidates]
            if min(map(len, passed)) >= groups or len(rounds) == max_rounds or position == len(data):
                break
        chosen = [(p + [i for i in c if i not in p])[:groups] for p, c in zip(passed, candidates, strict=True)]
        extend = max(min(len(p), groups) for p in passed)
        return {
            "trained": chosen,
            "sizes": [[N if g < extend else k for g in range(groups)] for _ in range(processes)],
            "rounds": len(rounds),
            "generated": processes * (len(rounds) * groups * k + extend * (N - k)),
            "extended": processes * extend,
            "filled": sum(groups - min(len(p), groups) for p in passed),
        }

    while len(result) < steps:
        position %= len(data)
        step = screen_step()
        ds_rounds = [step]
        while dynamic_sampling:
            kept = [[i for r in ds_rounds for i in r["trained"][p] if flags[i] == "1"] for p in range(processes)]
            if min(map(len, kept)) >= groups or len(ds_rounds) == max_rounds or position == len(data):
                break
            ds_rounds.append(screen_step())
        if len(ds_rounds) > 1:
            trained, sizes, last = [], [], ds_rounds[-1]
            for p in range(processes):
                pools = [(i, size) for r in ds_rounds for i, size in zip(r["trained"][p], r["sizes"][p], strict=True)]
                varied = [pool for pool in pools if flags[pool[0]] == "1"][:groups]
                fill = [
                    pool for pool in zip(last["trained"][p], last["sizes"][p], strict=True) if flags[pool[0]] == "0"
                ]
                chosen = varied + fill[: groups - len(varied)]
                trained.append([i for i, _ in chosen])
                sizes.append([size for _, size in chosen])
            step = {
                "trained": trained,
                "sizes": sizes,
                **{key: sum(r[key] for r in ds_rounds) for key in ("rounds", "generated", "extended")},
                "filled": sum(flags[i] == "0" for prompts in trained for i in prompts),
            }
        result.append(step)
    return result


def simulate_history(flags: str, processes: int, groups: int, steps: int, settings: dict) -> list[dict]:
    """Per step, by the rules with the core's history: candidates in data order; skip draws for every process's
    candidates, round by round, until each holds G not skipped; each process's plan (`plan_from_history`); the
    pools' outcomes observed in global order (a `v` pool of s rollouts: positions 0..s-1, s - 1 successes)."""
    history = PassRateHistory(exploration=settings["history_exploration"], seed=0)
    sizes = list(range(M, settings["max_rollouts_per_prompt"] + 1))
    data, position, result = batches(flags, processes * groups), 0, []
    while len(result) < steps:
        position %= len(data)
        rounds, kept = [], []
        while True:
            rounds.append(data[position])
            position += 1
            ids = [prompt_id(name(i, flags)) for i in rounds[-1]]
            kept.append(~history.draw_skips(ids, N).view(processes, groups))
            if not another_round_needed(kept, settings.get("max_generation_rounds", 3)) or position == len(data):
                break
        skipped = ~torch.cat(kept, dim=1)
        trained, pool_sizes, observed = [], [], []
        for p in range(processes):
            candidates = [i for r in rounds for i in r[p * groups : (p + 1) * groups]]
            plan, _ = plan_from_history(
                history,
                [prompt_id(name(i, flags)) for i in candidates],
                groups,
                sizes,
                BUDGET,
                M,
                skip_at=N,
                objective="informative",  # the default under TRL's group scaling (at m = 2, variance's equal)
                skipped=skipped[p],
            )
            trained.append([candidates[c] for c in plan.chosen.tolist()])
            pool_sizes.append(plan.sizes.tolist())
        for prompts, process_sizes in zip(trained, pool_sizes, strict=True):
            for i, size in zip(prompts, process_sizes, strict=True):
                scores = torch.arange(size, dtype=torch.float64) if flags[i] == "1" else torch.ones(size)
                observed.append((prompt_id(name(i, flags)), scores))
        largest = max(len(s) for _, s in observed)
        padded = torch.full((len(observed), largest), float("nan"), dtype=torch.float64)
        for row, (_, scores) in enumerate(observed):
            padded[row, : len(scores)] = scores
        history.observe([key for key, _ in observed], padded)
        result.append(
            {
                "trained": trained,
                "sizes": pool_sizes,
                "rounds": len(rounds),
                "generated": processes * BUDGET,
                "skipped": int(skipped.numel()) - processes * groups,
            }
        )
    return result


def check_generations(run: dict, expected: list[dict], process: int, flags: str) -> None:
    for generation, step in zip(run["generations"], expected, strict=True):
        assert generation["prompts"] == [name(i, flags) for i in step["trained"][process] for _ in range(M)]
        # The trained rows come from their own prompt's rows (the tag names the prompt); m = 2 of a varying pool
        # keep one failure (position 0, reward 0) and one success.
        assert [tag // 100 for tag in generation["tags"]] == [int(p[1:3]) for p in generation["prompts"]]
        for first in range(0, len(generation["prompts"]), M):
            advantages = generation["advantages"][first : first + M]
            assert any(a != 0 for a in advantages) == (generation["prompts"][first][0] == "v")
    assert run["pods/rollouts_trained"] == [float(len(expected[0]["trained"]) * 2 * M)] * len(expected)
    assert run["pods/rollouts_generated"] == [float(step["generated"]) for step in expected]
    assert run["pods/allocation_rounds"] == [float(step["rounds"]) for step in expected]
    sizes = [sorted(s for process_sizes in step["sizes"] for s in process_sizes) for step in expected]
    histograms = [[s for s, count in enumerate(line["histogram"]) for _ in range(count)] for line in run["histogram"]]
    if process == 0:  # the main process writes the histogram
        assert histograms == sizes
        assert [line["step"] for line in run["histogram"]] == list(range(1, len(expected) + 1))


@pytest.mark.parametrize("k", [2, 3])
def test_screen_trains_the_prompts_that_pass_and_extends_them(tmp_path, k):
    run = run_allocation(tmp_path, FLAGS, rollout_allocation="screen", screen_size=k, per_device_train_batch_size=4)
    expected = simulate_screen(FLAGS, processes=1, groups=2, k=k, max_rounds=3, steps=4)
    assert [s["rounds"] for s in expected] == [3, 2, 1, 3]  # the round limit, a full step, the epoch end
    check_generations(run, expected, 0, FLAGS)
    assert run["pods/prompts_extended"] == [float(s["extended"]) for s in expected]
    assert run["pods/prompts_filled"] == [float(s["filled"]) for s in expected] == [1.0, 0.0, 1.0, 1.0]


def test_screen_with_dynamic_sampling_screens_again_before_filling(tmp_path):
    """Each screening step is a round of dynamic sampling: while a trained pool does not vary, another screening
    step runs on further data, and its varying pools replace the fills."""
    run = run_allocation(
        tmp_path,
        FLAGS,
        rollout_allocation="screen",
        screen_size=2,
        per_device_train_batch_size=4,
        dynamic_sampling=True,
        max_generation_rounds=2,
    )
    expected = simulate_screen(FLAGS, processes=1, groups=2, k=2, max_rounds=2, steps=4, dynamic_sampling=True)
    alone = simulate_screen(FLAGS, processes=1, groups=2, k=2, max_rounds=2, steps=4)
    assert sum(s["filled"] for s in expected) < sum(s["filled"] for s in alone)  # the case shows the difference
    check_generations(run, expected, 0, FLAGS)
    assert run["pods/prompts_filled"] == [float(s["filled"]) for s in expected]


def test_a_screen_smaller_than_m_extends_every_trained_prompt(tmp_path):
    """k = 2 < m = 3: no screen alone can be trained, so all G are extended (n = 4, m = 3, 6 rows: G = 2)."""
    run = run_allocation(
        tmp_path, FLAGS, rollout_allocation="screen", screen_size=2, num_selected=3, per_device_train_batch_size=6
    )
    rounds = [r["rounds"] for r in simulate_screen(FLAGS, processes=1, groups=2, k=2, max_rounds=3, steps=4)]
    assert run["pods/prompts_extended"] == [2.0] * 4
    assert run["pods/rollouts_generated"] == [float(r * 2 * 2 + 2 * 2) for r in rounds]


def test_history_skips_what_it_predicts_and_spends_the_budget_by_knapsack(tmp_path):
    run = run_allocation(tmp_path, FLAGS, per_device_train_batch_size=4, generation_budget=BUDGET, **HISTORY)
    expected = simulate_history(FLAGS, processes=1, groups=2, steps=8, settings=HISTORY)
    # The case covers skips with rounds, pools above n, and a constant prompt trained as a fill.
    assert max(s["rounds"] for s in expected) > 1
    assert max(max(s["sizes"][0]) for s in expected) > N
    check_generations(run, expected, 0, FLAGS)
    assert run["pods/prompts_skipped"] == [float(s["skipped"]) for s in expected]


@pytest.mark.slow
def test_two_processes_plan_every_process_alike(tmp_path):
    """On 2 processes (one launch, `allocation_run.py`): each process trains its planned prompts with its fixed rows,
    every process generates as many rows in every call (no hang), and the counts are summed over both."""
    run_launched(two_process_launch(), SCRIPT, str(tmp_path), TWO_PROCESS_FLAGS)
    screen = simulate_screen(TWO_PROCESS_FLAGS, processes=2, groups=2, k=2, max_rounds=3, steps=4)
    history = simulate_history(TWO_PROCESS_FLAGS, processes=2, groups=2, steps=8, settings=HISTORY)
    assert [s["extended"] for s in screen] == [4, 2, 4, 2]  # process 1 extends a fill, then both extend 1
    screen_ds = simulate_screen(
        TWO_PROCESS_FLAGS, processes=2, groups=2, k=2, max_rounds=2, steps=4, dynamic_sampling=True
    )
    assert [s["generated"] for s in screen_ds] != [s["generated"] for s in screen]  # dynamic sampling screened again
    for mode, expected in (("screen", screen), ("screen-ds", screen_ds), ("history", history)):
        for process in range(2):
            run = json.loads((tmp_path / f"{mode}-rank{process}.json").read_text())
            check_generations(run, expected, process, TWO_PROCESS_FLAGS)


def test_the_batch_row_budget_spreads_each_process_rows_over_variable_pools(tmp_path):
    """`selection_budget="batch"` over pools of 2..6 (padding never chosen): the step's 4 rows go to the prompts
    whose rewards vary (0 or 2.. of each), and a constant prompt, when trained, gets none."""
    run = run_allocation(
        tmp_path, FLAGS, per_device_train_batch_size=4, generation_budget=BUDGET, selection_budget="batch", **HISTORY
    )
    expected = simulate_history(FLAGS, processes=1, groups=2, steps=8, settings=HISTORY)
    assert run["pods/rollouts_trained"] == [4.0] * 8
    assert run["pods/rollouts_generated"] == [float(BUDGET)] * 8
    for generation, step in zip(run["generations"], expected, strict=True):
        varied = [name(i, FLAGS) for i in step["trained"][0] if FLAGS[i] == "1"]
        assert len(generation["prompts"]) == 4
        if varied:  # every row goes to a varying pool; a tag's position names a real rollout of it
            assert set(generation["prompts"]) == set(varied)
            assert all(tag % 100 < 6 for tag in generation["tags"])


def test_a_resumed_run_drops_the_histogram_lines_after_its_checkpoint(tmp_path):
    """Lines of steps after the checkpoint (and one torn by a kill) are dropped: the resumed run writes them again."""
    from types import SimpleNamespace

    from pods_rl.trainer.allocated import HISTOGRAM_FILE, RolloutAllocator

    args = SimpleNamespace(rollout_allocation="screen", output_dir=str(tmp_path), should_save=True)
    lines = [json.dumps({"step": step, "histogram": [0, 0, 2]}) for step in range(1, 6)]
    (tmp_path / HISTOGRAM_FILE).write_text("\n".join(lines) + '\n{"step": 6, "hist')
    RolloutAllocator(SimpleNamespace(args=args)).load(tmp_path / "checkpoint-3", step=3)
    assert (tmp_path / HISTOGRAM_FILE).read_text() == "\n".join(lines[:3]) + "\n"


def always_solved(completions: list[str], **kwargs) -> list[float]:
    return [1.0] * len(completions)


def recording(reward, calls: list):
    """`reward`, appending every row's (prompt, completion) to `calls`."""

    def scored(prompts: list, completions: list[str], **kwargs) -> list[float]:
        calls.extend(zip(prompts, completions, strict=True))
        return reward(completions)

    scored.__name__ = reward.__name__
    return scored


@pytest.mark.parametrize(
    ("rewards", "weights", "threshold"),
    [
        ([vowel_reward, always_solved], [0.5, 0.5], None),  # fractional successes: normalised scores fall below 0
        ([always_solved], [1.0], 0.5),  # an always-solved prompt: normalised scores are all 0
    ],
    ids=["fractional", "always-solved"],
)
def test_the_history_counts_the_weighted_reward_under_normalize_then_sum(tmp_path, rewards, weights, threshold):
    """normalize_then_sum rescales each group's rewards within the group, which is no pass rate; the history counts
    each rollout's weighted sum of the reward functions against success_threshold instead (as under
    sum_then_normalize). Every generated pool is trained and observed, so each prompt's evidence is the sum over the
    rows the reward functions scored."""
    calls = []
    trainer = make_trainer(
        tmp_path,
        reward=[recording(rewards[0], calls), *rewards[1:]],
        num_generations=4,
        num_selected=2,
        rollout_allocation="history",
        success_threshold=threshold,
        multi_objective_aggregation="normalize_then_sum",
        reward_weights=weights,
        max_steps=2,
    )
    trainer.train()
    expected = {}
    for prompt, completion in calls:
        score = sum(weight * reward([completion])[0] for weight, reward in zip(weights, rewards, strict=True))
        success = score if threshold is None else float(score >= threshold)
        successes, failures = expected.get(prompt_id(prompt), (0.0, 0.0))
        expected[prompt_id(prompt)] = (successes + success, failures + 1 - success)
    history = trainer._allocator.history
    assert len(history) == len(expected) > 0
    alpha, beta = history.posterior(list(expected))
    assert (alpha - 1).tolist() == pytest.approx([s for s, _ in expected.values()], rel=1e-6)
    assert (beta - 1).tolist() == pytest.approx([f for _, f in expected.values()], rel=1e-6, abs=1e-6)


def test_the_screen_band_reads_the_weighted_reward_under_normalize_then_sum(tmp_path):
    """An always-solved screen has pass rate 1 (its normalised scores are all 0): in the band [0.9, 1], every
    candidate passes and is extended, in one round."""
    trainer = make_trainer(
        tmp_path,
        reward=always_solved,
        num_generations=4,
        num_selected=2,
        rollout_allocation="screen",
        screen_size=2,
        screen_pass_rate_band=[0.9, 1.0],
        multi_objective_aggregation="normalize_then_sum",
        max_steps=2,
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "pods/prompts_extended" in entry]
    assert [entry["pods/prompts_extended"] for entry in logged] == [2.0, 2.0]
    assert [entry["pods/allocation_rounds"] for entry in logged] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("scale_rewards", "aggregation", "objective"),
    [
        ("group", "sum_then_normalize", "informative"),
        ("batch", "sum_then_normalize", "variance"),
        ("none", "sum_then_normalize", "variance"),
        ("none", "normalize_then_sum", "informative"),
    ],
)
def test_the_history_plans_with_the_objective_that_matches_the_advantages(
    tmp_path, scale_rewards, aggregation, objective
):
    """`allocation_objective="auto"` (the default) plans on `informative` under each group's own std, on `variance`
    otherwise; a named objective is used as named."""
    from types import SimpleNamespace

    from pods_rl import PODSConfig
    from pods_rl.trainer.allocated import RolloutAllocator

    settings = dict(
        output_dir=str(tmp_path),
        num_generations=4,
        num_selected=2,
        rollout_allocation="history",
        scale_rewards=scale_rewards,
        multi_objective_aggregation=aggregation,
    )
    assert RolloutAllocator(SimpleNamespace(args=PODSConfig(**fast_args(**settings)))).objective == objective
    named = PODSConfig(**fast_args(**settings, allocation_objective="knapsack_rl"))
    assert RolloutAllocator(SimpleNamespace(args=named)).objective == "knapsack_rl"
