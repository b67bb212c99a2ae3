"""How well `pods advise`'s forecast predicted the difficulty map (issue 65 item 2; the rule was committed before the
runs, docs/benchmarks/map-tiny.md): per finished level and arm, the forecast signal per step over GRPO m/m's beside
the measured speedup in steps to target (GRPO's steps / the arm's, at the report's target), whether the measured 95%
interval holds the forecast, whether the direction agrees where the primary verdict resolved; then Spearman's rank
correlation over all (level, arm) pairs with its exact permutation p-value (every ordering when there are at most 9
pairs, else 100,000 seeded draws).

    python benchmarks/map_calibration.py [benchmarks/results/map-tiny benchmarks/results/smollm2-answer ...]
        [--plot docs/benchmarks/map-tiny.png]

`--plot` draws the map's picture: each arm's measured speedup in steps (95% interval) against the level's base pass
rate, the forecast beside it (hollow, with its bootstrap interval), one marker shape per folder.

A level counts once its folder `flawed-F/` holds comparison.json (`pods compare --report` writes an interim one);
the forecasts are the folder's `advice-flawed-F.json`, read by `map_forecast.level_forecast`. Every folder given
is read alike (the SmolLM2 answer's: `advice-3term.json` and `3term/`), and all their pairs enter one rank
correlation; an arm the forecast has and a comparison did not run is skipped.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import numpy as np
from map_forecast import level_forecast
from scipy.stats import rankdata

PERMUTATIONS = 100_000


def pairs(folder: Path) -> list[dict]:
    """One record per finished (level, arm): forecast, measured estimate and interval, verdict."""
    records = []
    for advice_path in sorted(folder.glob("advice-*.json")):
        level = advice_path.stem.removeprefix("advice-")
        report_path = folder / level / "comparison.json"
        if not report_path.exists():
            continue
        advice, report = json.loads(advice_path.read_text()), json.loads(report_path.read_text())
        for arm, forecast in level_forecast(advice).items():
            if arm not in report["arms"]:
                continue
            versus = report["arms"][arm]["vs_baseline"]
            steps = versus["steps_to_target"]
            records.append(
                {
                    "level": level,
                    "pass_rate": advice["sample"]["mean_pass_rate"],
                    "arm": arm,
                    "folder": folder.name,
                    "forecast": forecast["ratio"],
                    "forecast_low": forecast["low"],
                    "forecast_high": forecast["high"],
                    "estimate": steps["estimate"],
                    "low": steps["low"],
                    "high": steps["high"],
                    "verdict": versus["verdicts"]["steps_to_target"],
                }
            )
    return records


def holds(record: dict) -> bool | None:
    """Whether the measured interval holds the forecast (None: no interval)."""
    if record["low"] is None and record["high"] is None:
        return None
    low = record["low"] if record["low"] is not None else 0.0
    high = record["high"] if record["high"] is not None else math.inf
    return low <= record["forecast"] <= high


def direction_agrees(record: dict) -> bool | None:
    """Where the primary verdict resolved (faster or slower), whether the forecast points the same way."""
    if record["verdict"] not in ("faster", "slower"):
        return None
    return (record["forecast"] > 1) == (record["verdict"] == "faster")


def spearman(forecast: list[float], measured: list[float], seed: int = 0) -> tuple[float, float]:
    """Spearman's rho (ranks, ties averaged) and its two-sided permutation p-value: exact over every ordering of the
    measured ranks for up to 9 pairs, else `PERMUTATIONS` seeded draws."""
    x, y = rankdata(forecast), rankdata(measured)
    if len(x) <= 9:
        orderings = np.array(list(itertools.permutations(y)))
    else:
        rng = np.random.default_rng(seed)
        orderings = np.array([rng.permutation(y) for _ in range(PERMUTATIONS)])
    xc = (x - x.mean()) / np.linalg.norm(x - x.mean())
    centred = orderings - orderings.mean(axis=1, keepdims=True)
    values = centred @ xc / np.linalg.norm(centred, axis=1)
    rho = float(np.corrcoef(x, y)[0, 1])
    return rho, float(np.mean(np.abs(values) >= abs(rho) - 1e-12))


def plot(records: list[dict], path: Path) -> None:
    """Speedup in steps to target against base pass rate: measured (filled, 95% interval) and forecast (hollow,
    bootstrap interval) side by side per arm; an interval open above is drawn to the top edge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"pods": "tab:blue", "grpo-ds": "tab:orange"}
    offsets = {"pods": -1.6, "grpo-ds": 0.8}  # points of pass rate: measured at the offset, forecast 0.8 right of it
    shapes = dict(zip(dict.fromkeys(r["folder"] for r in records), "osD^v", strict=False))
    top, bottom = 8.0, 0.25
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=80)
    for r in records:
        x = 100 * r["pass_rate"] + offsets.get(r["arm"], 0.0)
        colour, shape = colours.get(r["arm"], "black"), shapes[r["folder"]]
        low, high = max(r["low"] or bottom, bottom), min(r["high"] or top, top)
        ax.plot([x, x], [low, high], color=colour, linewidth=2)
        if r["estimate"] is not None:
            ax.plot([x], [min(max(r["estimate"], bottom), top)], shape, color=colour, markersize=6)
        ax.plot([x + 0.8] * 2, [r["forecast_low"], r["forecast_high"]], color=colour, linewidth=1, alpha=0.6)
        ax.plot([x + 0.8], [r["forecast"]], shape, color=colour, markersize=6, markerfacecolor="white")
    for arm, colour in colours.items():
        ax.plot([], [], "o", color=colour, label=f"{arm}: measured (95%)")
        ax.plot([], [], "o", color=colour, markerfacecolor="white", label=f"{arm}: forecast before the runs")
    for folder, shape in shapes.items():
        if len(shapes) > 1:
            ax.plot([], [], shape, color="gray", label=folder)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    ax.minorticks_off()
    ax.set_yticks([0.25, 0.5, 1, 1.5, 2, 3, 4, 8], ["0.25", "0.5", "1", "1.5", "2", "3", "4", "8"])
    ax.set_xlim(0, 100)
    ax.set_xlabel("base pass rate (sampled at the training temperature), %", fontsize=8)
    ax.set_ylabel("speedup over GRPO 4/4 in steps to target\n(forecast: signal per step ratio)", fontsize=8)
    ax.set_title("Where PODS pays: measured steps speedup vs forecast, by base pass rate", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(folders: list[Path], plot_path: Path | None = None) -> None:
    records = [record for folder in folders for record in pairs(folder)]
    print("| level | base pass rate | arm | forecast | measured steps speedup (95%) | holds | verdict | direction |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        high = "inf" if r["high"] is None else f"{r['high']:.2f}"
        interval = "none" if r["low"] is None else f"{r['low']:.2f}-{high}"
        measured = "no estimate" if r["estimate"] is None else f"{r['estimate']:.2f}x ({interval})"
        agrees = {True: "agrees", False: "disagrees", None: "-"}[direction_agrees(r)]
        print(
            f"| {r['level']} | {r['pass_rate']:.1%} | {r['arm']} | {r['forecast']:.2f}x | {measured} | "
            f"{ {True: 'yes', False: 'no', None: '-'}[holds(r)] } | {r['verdict']} | {agrees} |"
        )
    scored = [r for r in records if r["estimate"] is not None]
    if len(scored) >= 3:
        rho, p = spearman([r["forecast"] for r in scored], [r["estimate"] for r in scored])
        print(f"\nSpearman's rank correlation over {len(scored)} pairs: {rho:+.2f} (permutation p = {p:.3f})")
    else:
        print(f"\n{len(scored)} pair(s) with an estimate: too few for a rank correlation")

    if plot_path is not None:
        plot(records, plot_path)
        print(f"wrote {plot_path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[Path(__file__).parent / "results" / "map-tiny"])
    parser.add_argument("--plot", type=Path, help="also draw the map's picture into this PNG")
    options = parser.parse_args()
    main(options.folders, options.plot)
