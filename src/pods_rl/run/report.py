"""What a finished run leaves for people: `report.md` and `accuracy.png` (accuracy vs training time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers
import matplotlib.pyplot as plt

from pods_rl.machine import machine_label
from pods_rl.run.settings import RunSettings


def plot_accuracy(evaluations: list[dict], path: Path, *, title: str) -> None:
    seconds = [e["train_seconds"] for e in evaluations]
    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=120)
    axis.plot(seconds, [100 * e["accuracy"] for e in evaluations], marker="o", label="greedy pass@1")
    if "accuracy_sampled" in evaluations[0]:
        sampled = [100 * e["accuracy_sampled"] for e in evaluations]
        axis.plot(seconds, sampled, marker="s", linestyle="--", label="sampled pass@1")
    axis.set_xlabel("training time (s, evaluation and checkpoints excluded)")
    axis.set_ylabel("held-out accuracy (%)")
    axis.set_title(title)
    axis.set_ylim(0, 100)
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def summary_line(summary: dict[str, Any], report: Path) -> str:
    """The console's last line of a finished run, e.g. "38.0% -> 98.0% (+60.0 points) in 81 s of training; report:
    runs/x/report.md", with the precision when the summary names it (summary.json keeps every field)."""
    base, final, seconds = 100 * summary["base_accuracy"], 100 * summary["final_accuracy"], summary["train_seconds"]
    precision = f" ({summary['precision']['dtype']})" if "precision" in summary else ""
    return (
        f"{base:.1f}% -> {final:.1f}% ({final - base:+.1f} points) in {seconds:.{0 if seconds >= 10 else 1}f} s of "
        f"training{precision}; report: {report}"
    )


def write_report(output_dir: Path, settings: RunSettings, summary: dict[str, Any], evaluations: list[dict]) -> None:
    title = f"{settings.model} on {settings.task}"
    plot_accuracy(evaluations, output_dir / "accuracy.png", title=title)
    trainer = settings.trainer
    rows = "\n".join(
        f"| {e['step']} | {e['train_seconds']:.1f} | {100 * e['accuracy']:.1f} |"
        + (f" {100 * e['accuracy_sampled']:.1f} |" if "accuracy_sampled" in e else "")
        for e in evaluations
    )
    sampled_header = " sampled (%) |" if "accuracy_sampled" in evaluations[0] else ""
    text = f"""# PODS run: {title}

| | |
|---|---|
| base accuracy | {100 * summary["base_accuracy"]:.1f}% |
| final accuracy | {100 * summary["final_accuracy"]:.1f}% |
| peak accuracy | {100 * summary["peak_accuracy"]:.1f}% (step {summary["peak_step"]}) |
| gain (final - base) | {100 * (summary["final_accuracy"] - summary["base_accuracy"]):+.1f} points |
| training time | {summary["train_seconds"]:.1f} s over {summary["steps"]} steps |
| pool n / selected m / rule | {trainer.get("num_generations")} / {trainer.get("num_selected")} / \
{trainer.get("selection_rule", "max_variance")} |
| held-out examples | {summary["num_eval_examples"]} |
| machine | {machine_label(summary.get("machine"))} |

![accuracy vs training time](accuracy.png)

## Evaluations

| step | training time (s) | greedy accuracy (%) |{sampled_header}
|---|---|---|{"---|" if sampled_header else ""}
{rows}

Per-step rewards, selection statistics and phase times (generate, score, select, update) are in
`metrics.jsonl`; the resolved settings are in `config.yaml`.
"""
    (output_dir / "report.md").write_text(text)
