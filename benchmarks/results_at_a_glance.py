"""The shipped comparisons at a glance: one table and one small picture, read from their comparison.json records.

For each comparison kept in `benchmarks/results/` (its own report is comparison.md there; 5 to 12 seeds an arm), every
arm against the baseline: the primary verdict (Holm-adjusted over the comparison's arms) and the secondary ones
(unadjusted), the time-to-target and steps-to-target speedups with their 95% intervals, and the difference in mean
accuracy over the window. A comparison clocked by steps tests no time to target
(its runs may mix CPUs): its time cell says "not tested" and the picture draws its steps to target instead. Prints a
Markdown table (the README's "results at a glance" and docs/benchmarks/README.md hold its output; tests/test_docs.py
checks that they still do) and, with `--plot`, draws the time-to-target speedups with their intervals on a log axis
(docs/benchmarks/at-a-glance.png). No training, no timing.

    .venv/bin/python benchmarks/results_at_a_glance.py --arm pods   # the README's rows
    .venv/bin/python benchmarks/results_at_a_glance.py --link-prefix "" --plot docs/benchmarks/at-a-glance.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pods_rl.compare.measures import other_pieces, p_text, ratio_text

RESULTS = Path(__file__).parent / "results"

# The shipped comparisons, in the order the README lists them: folder -> (short setup, CPU, page in docs/benchmarks/).
COMPARISONS = {
    "tiny-epyc-avx512": ("tiny, 60 s", "AMD EPYC, AVX-512", "tiny-epyc-avx512.md"),
    "tiny-epyc-avx512-20s": ("tiny, first 20 s", "AMD EPYC, AVX-512", "tiny-epyc-avx512-20s.md"),
    "smollm2-sums": ("SmolLM2 a+b", "Intel Xeon, AVX-512", "smollm2-sums.md"),
    "smollm2-3term-epyc": ("SmolLM2 a+b+c", "AMD EPYC, AVX-512, vLLM", "smollm2-3term.md"),
    "allocation-tiny-epyc-avx512": ("tiny, allocation", "AMD EPYC, AVX-512", "allocation-tiny-epyc-avx512.md"),
    "allocation-3term": ("SmolLM2 a+b+c, allocation", "Intel Xeon and AMD EPYC, AVX-512", "allocation-3term.md"),
    "map-tiny/flawed-0.9": ("tiny map, base pass rate 10%", "AMD EPYC, AVX2", "map-tiny.md"),
    "map-tiny/flawed-0.6": ("tiny map, base pass rate 25%", "AMD EPYC, AVX2", "map-tiny.md"),
    "map-tiny/flawed-0.3": ("tiny map, base pass rate 53%", "AMD EPYC, AVX2; Intel Xeon, AVX-512", "map-tiny.md"),
}


def ratio(measure: dict) -> str:
    """`1.30x (0.45-4.39)`: a speedup and its 95% interval, the piece of the accepted speedups holding the estimate
    (`+2 pieces`: the test accepts speedups elsewhere too); `- (0.00-∞)` where the arm never reached the target (no
    estimate) and the interval has no upper end."""
    estimate = "-" if measure["estimate"] is None else f"{measure['estimate']:.2f}x"
    others = len(other_pieces(measure))
    more = f", +{others} piece{'s' if others > 1 else ''}" if others else ""
    return f"{estimate} ({measure['low']:.2f}-{ratio_text(measure['high'])}{more})"


def points(measure: dict) -> str:
    """`+3.1 (-4.0 to +10.1)`: a difference in accuracy points and its 95% interval."""
    return f"{100 * measure['estimate']:+.1f} ({100 * measure['low']:+.1f} to {100 * measure['high']:+.1f})"


def rows(results: Path = RESULTS, arms: list[str] | None = None) -> list[dict]:
    """One row per arm (all, or those named) of every shipped comparison, against that comparison's baseline."""
    table = []
    for folder, (setup, cpu, page) in COMPARISONS.items():
        report = json.loads((results / folder / "comparison.json").read_text())
        baseline = report["settings"]["baseline"]
        for arm, record in report["arms"].items():
            if arm == baseline or (arms and arm not in arms):
                continue
            versus = record["vs_baseline"]
            table.append(
                {
                    "page": page,
                    "setup": setup,
                    "cpu": cpu,
                    "arm": f"{arm} {record['n']}/{record['m']}",
                    "baseline": f"{baseline} {report['arms'][baseline]['n']}/{report['arms'][baseline]['m']}",
                    "time": versus["time_to_target"],
                    "steps": versus["steps_to_target"],
                    "window": versus["mean_accuracy_difference"],
                    "adjusted": versus["adjusted_p_values"],
                    "verdicts": versus["verdicts"],
                    "roles": versus["roles"],
                }
                | ({"resolved_at_look": versus["resolved_at_look"]} if "resolved_at_look" in versus else {})
            )
    return table


SHORT = {"time_to_target": "time", "steps_to_target": "steps", "mean_accuracy": "window"}


def markdown(table: list[dict], link_prefix: str = "") -> str:
    """The table as Markdown: each setup links its page (`link_prefix` + page), 95% intervals in parentheses, the
    primary verdict with its Holm-adjusted p-value and the secondary verdicts that resolved (unadjusted)."""
    lines = [
        "| setup (CPU) | arm vs baseline | time to target | steps to target | window mean, points | "
        "primary verdict (Holm p) | secondary, unadjusted |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        primary = _primary(row)
        verdict = f"{SHORT[primary]}: {row['verdicts'][primary]} ({primary_p(row, primary)})"
        resolved = [
            f"{SHORT[key]} {word}"
            for key, word in row["verdicts"].items()
            if row["roles"][key] == "secondary" and word not in ("not resolved", "not tested")
        ]
        setup = f"[{row['setup']}]({link_prefix}{row['page']}) ({row['cpu']})"
        time = "not tested" if untested_time(row) else ratio(row["time"])
        lines.append(
            f"| {setup} | {row['arm']} vs {row['baseline']} | {time} | {ratio(row['steps'])} | "
            f"{points(row['window'])} | {verdict} | {', '.join(resolved) or 'none resolved'} |"
        )
    return "\n".join(lines)


def primary_p(row: dict, primary: str) -> str:
    """The primary verdict's Holm-adjusted p-value; a sequential design has none (its test meets an O'Brien-Fleming
    boundary at some look or at none), so it says at how many seeds it resolved."""
    if "resolved_at_look" not in row:
        return p_text(row["adjusted"][primary])
    look = row["resolved_at_look"]
    return "sequential: at no look" if look is None else f"sequential: at {look} seeds"


def _primary(row: dict) -> str:
    return next(key for key, role in row["roles"].items() if role == "primary")


def untested_time(row: dict) -> bool:
    """A comparison clocked by steps: its time to target mixes the CPUs its runs ran on and is not tested."""
    return row["verdicts"]["time_to_target"] == "not tested"


def plot(table: list[dict], path: Path) -> None:
    """Time-to-target speedups over the baseline with 95% intervals, one line per arm, grouped by comparison; a
    comparison clocked by steps draws its steps to target (hollow marker), its seconds being untested."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 1.4 + 0.17 * len(table)), dpi=80)
    colours = {"grpo-pool": "tab:gray", "pods": "tab:blue", "grpo-ds": "tab:orange", "pods-ds": "tab:green"}
    colours |= {
        "pods-screen": "tab:red",
        "grpo-screen": "tab:pink",
        "pods-history": "tab:purple",
        "grpo-history": "tab:brown",
    }
    labels = []
    for y, row in enumerate(reversed(table)):
        arm = row["arm"].split(" ")[0]
        steps = untested_time(row)
        speedup = row["steps" if steps else "time"]
        colour = colours.get(arm, "black")
        low, high = max(speedup["low"], 0.1), min(speedup["high"] or 10.0, 10.0)
        ax.plot([low, high], [y, y], color=colour, linewidth=2)
        if speedup["estimate"] is not None:
            estimate = min(max(speedup["estimate"], 0.1), 10.0)
            ax.plot([estimate], [y], "o", color=colour, markersize=5, markerfacecolor="white" if steps else colour)
        labels.append(f"{row['setup']}: {arm}" + (" (steps)" if steps else ""))
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_xlim(0.1, 10)
    ax.set_xticks([0.1, 0.25, 0.5, 1, 2, 4, 10], ["0.1", "0.25", "0.5", "1", "2", "4", "10"])
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel(
        "speedup over GRPO to 75% of its gain, 95% interval (> 1 is faster)\n"
        "in time; hollow: in steps (a comparison clocked by steps)",
        fontsize=8,
    )
    faster = sum(row["verdicts"][_primary(row)] == "faster" for row in table)
    slower = sum(row["verdicts"][_primary(row)] == "slower" for row in table)
    ax.set_title(
        f"Primary verdicts: {faster} arm(s) resolved faster than GRPO, {slower} slower\n(Holm over each comparison's "
        "arms)",
        fontsize=9,
    )
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", type=Path, help="also draw the time-to-target speedups into this PNG")
    parser.add_argument("--arm", action="append", help="only these arms (repeatable; default: every arm)")
    parser.add_argument("--link-prefix", default="docs/benchmarks/", help="where the per-comparison pages are")
    options = parser.parse_args()
    print(markdown(rows(arms=options.arm), options.link_prefix))
    if options.plot:
        plot(rows(), options.plot)
        print(f"wrote {options.plot}")


if __name__ == "__main__":
    main()
