"""The benchmark scripts run: the GPU check's dry mode takes the same code path (measuring_config, PODSTrainer, the
phase logs) on the CPU at a tiny shape."""

import argparse
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pods_rl.console import make_console

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_reports_the_rollouts_of_both_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--steps", "2"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        cells[0]: cells[1:5]
        for line in result.stdout.splitlines()
        if (cells := [c.strip() for c in re.split("[│|]", line) if c.strip()]) and cells[0] in ("GRPO", "PODS")
    }
    # run, n, m, generated, trained per step: 2 prompts, m = 4, PODS pools of n = 16
    assert rows == {"GRPO": ["4", "4", "8", "8"], "PODS": ["16", "4", "32", "8"]}
    entry = result.stdout.split("cost_models:", 1)[1]  # the step cost, to paste into a comparison's settings
    assert "source: benchmarks/gpu_check.py" in entry and "trained_per_step: 8}" in entry


def test_machine_check_reports_compute_and_both_page_fault_costs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "machine_check.py"), "--mib", "16", "--repeats", "2"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        cells[0]: float(cells[1])
        for line in result.stdout.splitlines()
        if len(cells := [c.strip() for c in re.split("[│|]", line) if c.strip()]) == 2
        and re.fullmatch(r"[\d.]+", cells[1])
    }
    assert set(rows) == {
        "fp32 matmul 2048 (GFLOP/s)",
        "allocate, touch, free: us a page (glibc's defaults)",
        "allocate, touch, free: us a page (freed memory kept)",
    }
    assert all(value > 0 for value in rows.values())


def test_arm_vs_arms_measures_pods_against_each_arm_of_a_kept_comparison() -> None:
    """The kept 3-term comparison's PODS row against GRPO 4/4 is the report's own (its comparison.json)."""

    from pods_rl.compare.measures import difference_text, speedup_text

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    folder = ROOT / "benchmarks" / "results" / "smollm2-3term-epyc"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "arm_vs_arms.py"), str(folder)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line.strip("| ").split(" | ") for line in result.stdout.splitlines() if line.startswith("| ")]
    rows = {cells[0]: cells[1:] for cells in table[1:]}
    assert list(rows) == ["grpo", "grpo-pool", "grpo-ds", "pods-ds"]  # every arm but pods, in the folder's order
    versus = json.loads((folder / "comparison.json").read_text())["arms"]["pods"]["vs_baseline"]
    assert rows["grpo"][0] == speedup_text(versus["time_to_target"])
    assert rows["grpo"][2] == speedup_text(versus["steps_to_target"])
    assert rows["grpo"][4] == difference_text(versus["mean_accuracy_difference"])
    assert rows["grpo"][6] == "+15.8, -0.1, -1.4, -2.0, +1.0, +5.0"  # the per-seed window differences
    assert result.stdout.splitlines()[-1].startswith(
        "Verdicts: one primary question per arm, time to target, at the 5% level after Holm's adjustment over the 4 "
        "arm(s)' primary tests"
    )


def test_compare_coverage_prints_every_case_of_every_table() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = str(ROOT / "benchmarks" / "compare_coverage.py")
    result = subprocess.run(
        [sys.executable, script, "--comparisons", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    coverage = (4 * 2 * 4 + 3 * (5 * 2 + 1)) * 2  # (exponential cases, harder cases and a falling baseline) x methods
    verdicts, sequential, falling, seeds = 4 * 2 * 2, 3 * 3, 2 * 2 * 2, 3 * 2 * 3
    assert len(rows) == coverage + verdicts + sequential + falling + seeds


def table_rows(output: str) -> list[list[str]]:
    """The body rows of rich tables in `output`, as their cells."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")] for line in output.splitlines() if line.startswith("│")
    ]


def run_benchmark(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_dropin_overhead_runs_both_trainers_interleaved(tiny_model_dir) -> None:
    output = run_benchmark(
        "dropin_overhead.py", "--models", "tiny", "--quick", "--steps", "2", "--pairs", "1", "--tiny-dir",
        str(tiny_model_dir),
    )  # fmt: skip
    rows = {cells[1]: cells for cells in table_rows(output) if cells[0] == "tiny"}
    assert list(rows) == ["GRPO", "PODS"]
    grpo, pods = float(rows["GRPO"][3]), float(rows["PODS"][3])
    assert grpo > 0 and pods > 0
    # The ratio is of the unrounded seconds: within what the printed (rounded) seconds allow, +- its own rounding.
    half = 0.5 * 10.0 ** -len(rows["GRPO"][3].partition(".")[2])
    ratio = float(rows["PODS"][4].removesuffix("x"))
    assert (pods - half) / (grpo + half) - 0.0005 <= ratio <= (pods + half) / (grpo - half) + 0.0005
    assert rows["PODS"][5] == "identical" or rows["PODS"][5].endswith("(rounding)")  # the same rows, advantages


def test_precision_phases_times_each_phase_in_both_precisions_and_checks_the_tokens(tiny_model_dir) -> None:
    output = run_benchmark(
        "precision_phases.py", "--settings", "tiny", "--quick", "--steps", "2", "--repeats", "1",
        "--tiny-dir", str(tiny_model_dir),
    )  # fmt: skip
    assert output.startswith("machine: ") and "bf16 instructions: " in output.splitlines()[0]
    rows = table_rows(output)
    phases = {cells[1]: cells for cells in rows if len(cells) == 9}
    assert list(phases) == ["fp32", "bf16"]
    fp32, bf16 = float(phases["fp32"][6]), float(phases["bf16"][6])
    assert fp32 > 0 and bf16 > 0 and phases["bf16"][7].endswith("x")
    # The speed-up comes from the unrounded seconds: within what the printed 3 decimals allow (and its own 2).
    low, high = (fp32 - 0.0005) / (bf16 + 0.0005), (fp32 + 0.0005) / max(bf16 - 0.0005, 1e-9)
    assert low - 0.005 <= float(phases["bf16"][7][:-1]) <= high + 0.005
    assert all(float(phases[p][8]) > 0 for p in phases)  # the start-up measurement's prediction
    (check,) = [cells for cells in rows if len(cells) == 5]
    assert check[:2] == ["tiny", "8"]
    mean, largest = float(check[2]), float(check[3])
    assert 0 <= mean <= largest <= 1 and check[4].endswith("%")


def test_precision_learning_reports_paired_differences_and_equivalence(tmp_path, monkeypatch) -> None:
    """From finished pairs (made up here): per seed and across seeds, bf16 minus fp32, and the verdict; runs already
    finished are never trained again, an interrupted one is trained from the start."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import precision_learning as learning

    root = tmp_path / "runs"

    def make_run(precision: str, seed: int, accuracies: list[float], *, done: bool = True) -> None:
        folder = learning.run_dir(root, "tiny", precision, seed)
        folder.mkdir(parents=True)
        records = [{"type": "eval", "step": 10 * i, "accuracy": a} for i, a in enumerate(accuracies)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        if done:
            summary = {"precision": {"dtype": precision}, "train_seconds": 20.0 if precision == "fp32" else 10.0,
                       "steps": 20}  # fmt: skip
            (folder / "summary.json").write_text(json.dumps(summary))

    # window means: fp32 (0.4 + 0.5) / 2 / 2 + (0.5 + 0.6) / 2 / 2 = 0.5; bf16 per seed 0.5 + d
    for seed, shift in enumerate([0.0, 0.01, -0.01]):
        make_run("fp32", seed, [0.4, 0.5, 0.6])
        make_run("bf16", seed, [0.4 + shift, 0.5 + shift, 0.6 + shift])
    make_run("bf16", 3, [0.4, 0.5], done=False)  # interrupted: no summary
    options = argparse.Namespace(root=root, margin=2.0, set=None, tiny_dir=None)
    trained = []

    def fake_run(command, **kwargs):
        folder = Path(command[command.index("--output-dir") + 1])
        trained.append((folder.relative_to(root).as_posix(), command[command.index("--set") + 1]))
        assert not folder.exists()  # the interrupted run's folder was cleared first
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(learning.subprocess, "run", fake_run)
    learning.train_missing("tiny", [0, 1, 2, 3], options, make_console(quiet=True))
    assert trained == [("tiny/bf16/seed-3", "trainer.bf16=true"), ("tiny/fp32/seed-3", "trainer.bf16=false")]

    table, lines = learning.report("tiny", [0, 1, 2, 3], options)
    text = io.StringIO()
    make_console(file=text).print(table)
    assert [tuple(cells) for cells in table_rows(text.getvalue())] == [
        ("0", "50.0", "50.0", "+0.0", "60.0", "60.0", "+0.0", "1.00", "0.50"),
        ("1", "50.0", "51.0", "+1.0", "60.0", "61.0", "+1.0", "1.00", "0.50"),
        ("2", "50.0", "49.0", "-1.0", "60.0", "59.0", "-1.0", "1.00", "0.50"),
    ]
    # differences 0, +1, -1: mean 0, sd 1, t(0.975, 2) = 4.303 -> +-2.48; t(0.95, 2) = 2.920 -> +-1.69 (inside 2)
    assert lines == [
        "tiny, window accuracy: bf16 minus fp32 +0.0 points (95% interval -2.5 to +2.5) over 3 seed(s): "
        "equivalent within +-2 points",
        "tiny, final accuracy: bf16 minus fp32 +0.0 points (95% interval -2.5 to +2.5) over 3 seed(s): "
        "equivalent within +-2 points",
        "tiny, training seconds a step: fp32 / bf16 = 2.00x (geometric mean over seeds)",
        "tiny: 1 of 4 seed(s) not finished in both precisions",
    ]
    assert learning.verdict([0.0, 3.0, -3.0], 2.0).startswith("not shown either way at +-2 points")
    assert learning.verdict([5.0, 5.5, 4.5], 2.0) == "not equivalent: beyond +-2 points"


def test_history_predictability_by_simulation_with_known_pass_rates(tmp_path, monkeypatch) -> None:
    """Prompts with known pass rates, groups of 4 drawn from them: half always or never solved, half solved half the
    time. The history of three passes ranks every extreme prompt above every middle one, so skipping half the
    prompts keeps only the middle ones (all-equal 1/8 of the time) and the AUC is the share of positives that are
    extreme plus half the rest; when every prompt is in the middle, the prediction knows nothing (AUC 1/2)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import history_predictability as hp
    import torch

    generator = torch.Generator().manual_seed(0)

    def passes(rates: torch.Tensor, count: int) -> list[torch.Tensor]:
        return [(torch.rand(len(rates), 4, generator=generator) < rates[:, None]).double() for _ in range(count)]

    rates = torch.cat([torch.zeros(1000), torch.ones(1000), torch.full((2000,), 0.5)])
    *earlier, last = passes(rates, 4)
    result = hp.predictability(earlier, last, 0.5)
    middle_equal = ((last[2000:] == last[2000:, :1]).all(dim=1)).double()
    assert result["kept_all_equal_0.5"] == pytest.approx(middle_equal.mean().item())  # exactly the middle kept
    assert abs(result["kept_all_equal_0.5"] - 1 / 8) < 0.03
    positives_in_middle = middle_equal.sum().item()
    expected_auc = (2000 + 0.5 * positives_in_middle) / (2000 + positives_in_middle)
    assert result["auc"] == pytest.approx(expected_auc, abs=0.01)
    assert result["all_equal"] == pytest.approx((2000 + positives_in_middle) / 4000)
    assert result["extreme_rates"] == pytest.approx(0.5)

    *earlier, last = passes(torch.full((4000,), 0.5), 4)
    blind = hp.predictability(earlier, last, 0.5)
    assert abs(blind["auc"] - 0.5) < 0.05 and abs(blind["kept_all_equal_0.5"] - blind["all_equal"]) < 0.03
    assert math.isnan(hp.auc(torch.tensor([0.1, 0.2]), torch.tensor([True, True])))


def test_history_predictability_refuses_bad_input_in_one_line(tmp_path) -> None:
    script = str(ROOT / "benchmarks" / "history_predictability.py")
    for arguments, message in (
        ([str(tmp_path), "--passes", "1"], "--passes must be at least 2"),
        ([str(tmp_path)], "no config.yaml"),
    ):
        result = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True, timeout=60)
        assert result.returncode == 1 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_allocation_stats_averages_each_arms_allocation_over_the_steps_of_its_reported_runs(tmp_path) -> None:
    """Two arms, two seeds, known step records: each figure is its mean over every step of the chosen seeds, a
    tuning run and an unfinished run are not read, and a figure no step logs is a dash."""
    import yaml

    from pods_rl.compare.settings import COMPARE_FILE, resolve_compare

    settings = resolve_compare(None, [{"n": 16, "m": 4, "prompts_per_step": 2, "seeds": [0, 1, 2]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "pods")}
    (tmp_path / COMPARE_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))

    def run(folder: Path, steps: list[dict], finished: bool = True) -> None:
        folder.mkdir(parents=True)
        lines = [{"type": "eval", "step": 0, "accuracy": 0.5}] + [{"type": "step", **step} for step in steps]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        if finished:
            (folder / "summary.json").write_text("{}")

    grpo = {"pods/rollouts_generated": 8.0, "pods/zero_variance_groups_frac": 0.5}
    run(tmp_path / "grpo" / "seed-0", [grpo, {**grpo, "pods/zero_variance_groups_frac": 0.0}])
    run(tmp_path / "grpo" / "seed-1", [grpo])
    run(tmp_path / "grpo" / "seed-2", [{**grpo, "pods/rollouts_generated": 800.0}], finished=False)

    def screen(screened: float, sizes: tuple[float, float, float]) -> dict:
        low, mean, high = sizes
        return {
            "pods/rollouts_generated": 4 * screened + 24.0,
            "pods/generation_rounds": screened / 2,
            "pods/prompts_screened": screened,
            "pods/prompts_extended": 2.0,
            "pods/prompts_skipped": screened - 2,
            "pods/prompts_filled": 0.0,
            "pods/rollouts_per_prompt_min": low,
            "pods/rollouts_per_prompt_mean": mean,
            "pods/rollouts_per_prompt_max": high,
            "pods/zero_variance_groups_frac": 0.0,
        }

    run(tmp_path / "pods" / "seed-0", [screen(2, (16, 16, 16)), screen(6, (4, 10, 16))])
    run(tmp_path / "pods" / "seed-1", [screen(4, (16, 16, 16))])
    run(tmp_path / "tuning" / "pods" / "lr-0.0001" / "seed-100", [screen(100, (4, 4, 4))])

    script = str(ROOT / "benchmarks" / "allocation_stats.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    shown = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:] for line in shown.stdout.splitlines()[4:]}
    assert rows["grpo"] == ["0 1", "3", "8.0", *["—"] * 9, "33"]
    # pods: 3 steps screening 2, 6 and 4 prompts (mean 4): 40 rollouts, 2 rounds, 2 extended, 2 skipped; sizes.
    assert rows["pods"] == ["0 1", "3", "40.0", "2.0", "—", "4.0", "2.0", "2.0", "0.0", "12.0", "14.0", "16.0", "0"]
    only = subprocess.run(
        [sys.executable, script, str(tmp_path), "--seeds", "1"], capture_output=True, text=True, env=env
    )
    assert "| grpo | 1 | 1 | 8.0 |" in only.stdout and "| pods | 1 | 1 | 40.0 |" in only.stdout
    missing = subprocess.run([sys.executable, script, str(tmp_path / "none")], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "no comparison there" in missing.stderr


def test_the_maps_forecast_table_is_the_committed_forecasts_and_the_page_shows_it() -> None:
    """benchmarks/map_forecast.py reads the advice.json files committed before the map's runs: each arm's ratio is
    advise's own signal per step over GRPO m/m's, inside its bootstrap interval, levels by pass rate; the page's
    table is that output, unedited."""
    output = run_benchmark("map_forecast.py")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in output.splitlines()[2:]]
    folder = ROOT / "benchmarks" / "results" / "map-tiny"
    advice = {
        f"flawed_fraction={json.loads(p.read_text())['model_options']['flawed_fraction']}": json.loads(p.read_text())
        for p in folder.glob("advice-*.json")
    }
    assert len(rows) == 2 * len(advice) >= 8
    rates = [float(row[1].rstrip("%")) for row in rows]
    assert rates == sorted(rates)
    for level, rate, arm, forecast in rows:
        methods = {method["name"]: method for method in advice[level]["methods"]}
        ratio, low, high = map(float, re.match(r"([\d.]+)x \(([\d.]+)-([\d.]+)\)", forecast).groups())
        assert ratio == round(methods[arm]["versus_grpo"]["signal_per_step"], 2)
        assert low <= ratio <= high and rate == f"{advice[level]['sample']['mean_pass_rate']:.1%}"
    page = (ROOT / "docs" / "benchmarks" / "map-tiny.md").read_text()
    assert output.strip() in page


def test_the_maps_calibration_scores_each_finished_level_against_its_forecast(tmp_path, monkeypatch) -> None:
    """benchmarks/map_calibration.py on a level with a (synthetic) report: each arm's forecast beside the measured
    steps speedup, whether the interval holds it and whether a resolved verdict points its way; levels without a
    report are not scored; Spearman's exact permutation p-value is the share of orderings at least as extreme."""
    import shutil

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from map_calibration import spearman

    folder = ROOT / "benchmarks" / "results" / "map-tiny"
    for level in ("flawed-0.9", "flawed-0.6"):
        shutil.copy(folder / f"advice-{level}.json", tmp_path / f"advice-{level}.json")
    (tmp_path / "flawed-0.9").mkdir()
    steps = {
        "pods": {"estimate": 1.9, "low": 1.2, "high": 2.4, "verdict": "faster"},  # misses 2.58x; agrees
        "grpo-ds": {"estimate": 0.8, "low": 0.5, "high": None, "verdict": "slower"},  # holds 3.00x, disagrees
    }
    report = {
        "arms": {
            arm: {
                "vs_baseline": {
                    "steps_to_target": {key: value for key, value in figure.items() if key != "verdict"},
                    "verdicts": {"steps_to_target": figure["verdict"]},
                }
            }
            for arm, figure in steps.items()
        }
    }
    (tmp_path / "flawed-0.9" / "comparison.json").write_text(json.dumps(report))
    output = run_benchmark("map_calibration.py", str(tmp_path))
    lines = [line.split("|")[1:-1] for line in output.splitlines() if line.startswith("| flawed")]
    assert [[cell.strip() for cell in line] for line in lines] == [
        ["flawed-0.9", "10.0%", "pods", "2.58x", "1.90x (1.20-2.40)", "no", "faster", "agrees"],
        ["flawed-0.9", "10.0%", "grpo-ds", "3.00x", "0.80x (0.50-inf)", "yes", "slower", "disagrees"],
    ]
    assert "2 pair(s) with an estimate: too few for a rank correlation" in output
    # A second folder read alike (the SmolLM2 answer: advice-3term.json and 3term/); its pairs join the first's in one
    # rank correlation, and the forecast's grpo-ds is skipped where the comparison ran pods alone.
    other = tmp_path / "smollm2-answer"
    (other / "3term").mkdir(parents=True)
    shutil.copy(folder / "advice-flawed-0.6.json", other / "advice-3term.json")
    (other / "3term" / "comparison.json").write_text(json.dumps({"arms": {"pods": report["arms"]["pods"]}}))
    output = run_benchmark("map_calibration.py", str(tmp_path), str(other))
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in output.splitlines() if line.startswith("| ")]
    assert rows[-1] == ["3term", "25.2%", "pods", "1.83x", "1.90x (1.20-2.40)", "yes", "faster", "agrees"]
    assert "Spearman's rank correlation over 3 pairs" in output
    # The map's picture: drawn from the same pairs, one PNG.
    picture = tmp_path / "map.png"
    output = run_benchmark("map_calibration.py", str(tmp_path), str(other), "--plot", str(picture))
    assert f"wrote {picture}" in output and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert spearman([1, 2, 3, 4, 5], [2, 4, 6, 8, 10]) == (pytest.approx(1.0), pytest.approx(2 / 120))
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == (pytest.approx(-1.0), pytest.approx(2 / 24))


def test_crossing_spread_reads_back_a_known_seed_spread_and_adds_evaluation_noise(monkeypatch) -> None:
    """benchmarks/crossing_spread.py: without evaluation noise (ten million draws, an evaluation every step, no run
    censored by the horizon) the measured spread of log crossings is the seeds' spread of log time constants the runs
    were drawn with; with 400 draws on a curve that gains 12 points, noise alone spreads crossings of seeds that learn
    at one pace."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from crossing_spread import measured_spread

    from pods_rl.compare.simulation import Design

    exact = Design(
        "exact", every=1, horizon=200, base=0.5, plateau=0.9, step=0.0, questions=10**7, spread=0.3, reaches=0.999
    )
    spread, crossed = measured_spread(exact, runs=2000)
    assert spread == pytest.approx(0.3, abs=0.02) and crossed == 1.0
    flat = Design("flat", every=5, horizon=200, base=0.5, plateau=0.62, step=0.0, questions=400, spread=0.0)
    assert measured_spread(flat, runs=2000)[0] > 0.2
    output = run_benchmark("crossing_spread.py", "--base", "0.5", "--plateau", "0.62", "--runs", "50")
    assert len([line for line in output.splitlines() if line.startswith("| 0.")]) == 6
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = str(ROOT / "benchmarks" / "crossing_spread.py")
    bad = subprocess.run(
        [sys.executable, script, "--base", "0.7", "--plateau", "0.6"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "need 0 <= base < plateau <= 1" in bad.stderr
