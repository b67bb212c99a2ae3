"""Sequential comparisons: alpha spending over the looks, verdicts at each look, `pods compare --until-resolved`
adding seeds until the verdicts are resolved, and the error rate over all looks by simulation."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import yaml
from compare_fakes import synthetic_run
from scipy import stats
from typer.testing import CliRunner

from pods_rl.cli import app
from pods_rl.compare import runner as compare_runner
from pods_rl.compare.runner import ComparisonStopped, run_comparison
from pods_rl.compare.sequential import boundaries, decide, nominal_levels, planned_looks, spending
from pods_rl.compare.settings import load_compare, resolve_compare, with_sequential_plan
from pods_rl.compare.simulation import SHIPPED, Truth, verdict_power


def test_spending_is_obrien_fleming_like_and_spends_alpha_by_the_end():
    assert spending(0.0) == 0.0 and spending(1.0) == pytest.approx(0.05)
    assert spending(0.5) == pytest.approx(2 - 2 * stats.norm.cdf(1.959964 / math.sqrt(0.5)), rel=1e-5)
    assert [spending(t) for t in (0.25, 0.5, 0.75)] == sorted(spending(t) for t in (0.25, 0.5, 0.75))


def test_boundaries_spend_what_the_function_allows_at_each_look():
    """The first boundary is z_{0.975} / sqrt(t_1) exactly; every look's crossing probability, not crossed before,
    is the spending function's increment: checked on a million Brownian paths."""
    fractions = (0.25, 0.5, 0.75, 1.0)
    bounds = np.array(boundaries(fractions))
    assert bounds[0] == pytest.approx(stats.norm.ppf(0.975) / 0.5, rel=1e-6)
    assert list(bounds) == sorted(bounds, reverse=True)  # O'Brien-Fleming-like: strict early, near 1.96 at the end
    generator = np.random.default_rng(0)
    steps = generator.normal(size=(1_000_000, 4)) * np.sqrt(np.diff([0.0, *fractions]))
    statistics = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    crossed = np.cumsum(np.abs(statistics) >= bounds, axis=1) > 0
    assert crossed.mean(axis=0) == pytest.approx([spending(t) for t in fractions], abs=6e-4)


def test_a_single_look_is_holm_at_alpha():
    assert nominal_levels([6], 6) == [pytest.approx(0.05)]
    # Holm over three arms: p 0.01 <= 0.05 / 3, then 0.02 <= 0.05 / 2, then 0.06 > 0.05: two resolved.
    verdicts = decide([[(1, 0.02), (-1, 0.01), (1, 0.06)]], [6], 6)
    assert verdicts == [(0, 1), (0, -1), None]
    # No p-value (no target): not tested, and not counted in the family.
    assert decide([[(1, 0.03), (0, None)]], [6], 6) == [(0, 1), None]


def test_an_arm_is_resolved_at_the_first_look_whose_boundary_its_test_reaches():
    looks = planned_looks(4, 2, 8)
    assert looks == [4, 6, 8]
    levels = nominal_levels(looks, 8)
    assert levels[0] < levels[1] < levels[2] < 0.05
    # p = 2/70 at 4 seeds (every run of one arm first) misses the first boundary; 2/924 at 6 reaches the second.
    results = [[(1, 2 / 70)], [(1, 2 / 924)]]
    assert decide(results[:1], looks, 8) == [None]
    assert decide(results, looks, 8) == [(1, 1)]
    # Two arms: the second resolves at the second look only once the first has freed its share (Holm's recycling).
    second = levels[1] * 0.9  # within alpha's boundary at the look, not within alpha / 2's
    assert second > nominal_levels(looks, 8, 0.025)[1]
    assert decide([[(1, 0.5), (1, 0.5)], [(1, 1e-6), (-1, second)]], looks, 8) == [(1, 1), (1, -1)]
    assert decide([[(1, 0.5), (1, 0.5)], [(1, 0.3), (-1, second)]], looks, 8) == [None, None]


def test_optional_stopping_keeps_false_verdicts_at_five_percent():
    """With no difference, a comparison that looks at 4, 6 and 8 seeds and stops at the first resolved verdict is
    falsely resolved in at most 8% of 300 simulated comparisons (the binomial 99th percentile at 5%), and a true 2x
    is resolved more often than with the first look's 4 seeds alone, spending fewer seeds than 8 on average."""
    design = replace(SHIPPED[0], questions=200, seeds=8)
    null = verdict_power(design, Truth(1.0), 300, looks=[4, 6, 8], seed=3)
    assert null.false <= 0.08
    faster = verdict_power(design, Truth(2.0), 150, looks=[4, 6, 8], seed=4)
    fixed = verdict_power(replace(design, seeds=4), Truth(2.0), 150, seed=4)
    assert faster.resolved > fixed.resolved and faster.seeds < 8


def _separated_train(calls: list[tuple[str, int]], faster: bool = True):
    """A fake `pods train`: every pods run crosses 0.5 before every grpo run (when `faster`), or both arms follow the
    same curve; each seed shifts its run a little."""

    def train(settings, run_dir, lock=None) -> None:
        trainer = settings.trainer
        arm = "grpo" if trainer["num_generations"] == trainer["num_selected"] else "pods"
        calls.append((arm, settings.seed))
        shift = 0.001 * (settings.seed % 7)
        rise = 0.3 if arm == "pods" and faster else 0.15
        times = [0, 10, 20, 30, 40]
        accuracy = [0.2, 0.2 + rise + shift, 0.2 + 2 * rise + shift, 0.8, 0.8]
        record = synthetic_run(times, [min(a, 0.8) for a in accuracy], 2 * trainer["num_generations"], 8)
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(settings.to_dict()))
        lines = [{"type": "step", **s} for s in record["step"]] + [{"type": "eval", **e} for e in record["eval"]]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (run_dir / "summary.json").write_text(json.dumps({"steps": 4, "peak_accuracy": max(accuracy)}))

    return train


def _sequential_settings(max_seeds: int = 8):
    settings = resolve_compare(None, [{"n": 8, "m": 2, "prompts_per_step": 2, "seeds": [0, 1, 2, 3]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "pods")}
    return with_sequential_plan(settings, max_seeds, 2)


def test_until_resolved_adds_seeds_until_the_primary_verdict_is_resolved(tmp_path, monkeypatch):
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(compare_runner, "_train_in_subprocess", _separated_train(calls))
    comparison = run_comparison(_sequential_settings(), tmp_path / "cmp")
    # Look 1 (4 seeds): p = 2/70 misses the boundary; look 2 (6 seeds): p = 2/924 resolves it; seeds 6, 7 never run.
    assert sorted({seed for _, seed in calls}) == [0, 1, 2, 3, 4, 5] and len(calls) == 12
    assert comparison["verdicts"]["pods"]["time_to_target"] == "faster"
    versus = comparison["arms"]["pods"]["vs_baseline"]
    assert versus["resolved_at_look"] == 6
    family = comparison["method"]["family"]
    assert family["looks"] == [4, 6] and family["max_seeds"] == 8
    assert family["levels"] == pytest.approx(nominal_levels([4, 6], 8))
    assert load_compare(tmp_path / "cmp").seeds == [0, 1, 2, 3, 4, 5]
    assert "faster (primary, at the look of 6 seeds)" in comparison["summary"][0]
    assert "looks at 4, 6 seeds of at most 8" in comparison["summary"][-1]


def test_until_resolved_stops_at_max_seeds_and_resumes_where_it_stopped(tmp_path, monkeypatch):
    calls: list[tuple[str, int]] = []
    train = _separated_train(calls, faster=False)

    def stopping(settings, run_dir, lock=None):
        if len(calls) == 9:  # stopped in the second run after the first look (grpo seed 4 finished)
            raise ComparisonStopped(2, run_dir)
        train(settings, run_dir, lock)

    monkeypatch.setattr(compare_runner, "_train_in_subprocess", stopping)
    with pytest.raises(ComparisonStopped):
        run_comparison(_sequential_settings(), tmp_path / "cmp")
    assert load_compare(tmp_path / "cmp").seeds == [0, 1, 2, 3, 4, 5]  # the look's added seeds are saved
    calls.clear()
    monkeypatch.setattr(compare_runner, "_train_in_subprocess", train)
    comparison = run_comparison(load_compare(tmp_path / "cmp"), tmp_path / "cmp", resume=True)
    # Seeds 0-3 and grpo's seed 4 kept; with equal arms nothing resolves, so it runs to 8 seeds.
    assert sorted(calls) == [("grpo", 5), ("grpo", 6), ("grpo", 7), ("pods", 4), ("pods", 5), ("pods", 6), ("pods", 7)]
    assert comparison["verdicts"]["pods"]["time_to_target"] == "not resolved"
    assert comparison["method"]["family"]["looks"] == [4, 6, 8]
    assert (
        "not resolved (primary, sequential: at no look; the interval bounds it within 1.00-1.00x)"
        in comparison["summary"][0]
    )


def test_until_resolved_is_chosen_at_the_start_and_checked(tmp_path):
    runner = CliRunner()
    resumed = runner.invoke(app, ["compare", "--resume", str(tmp_path), "--until-resolved"])
    assert resumed.exit_code == 2 and "--until-resolved is chosen when a comparison starts" in resumed.output
    alone = runner.invoke(app, ["compare", "--dry-run", "--max-seeds", "8"])
    assert alone.exit_code == 2 and "--max-seeds and --seed-batch go with --until-resolved" in alone.output
    few = runner.invoke(app, ["compare", "--dry-run", "--until-resolved", "--max-seeds", "3", "--arm", "pods"])
    assert few.exit_code == 2 and "must not exceed max_seeds 3" in " ".join(few.output.split())
    with pytest.raises(ValueError, match="a sequential comparison adds its own seeds"):
        from pods_rl.compare.settings import extend_on_resume

        extend_on_resume(_sequential_settings(), [{"seeds": [0, 1, 2, 3, 9]}], where="--resume x")
