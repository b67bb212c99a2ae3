"""The difficulty map's forecasts (issue 65, docs/benchmarks/map-tiny.md): per level, what `pods advise` forecast
before any run of the map, as the ratio of learning signal per step of each compared arm to GRPO m/m, with a 95%
percentile bootstrap interval over the sampled prompts (per step: no step cost enters, so the figure carries to any
machine).

    python benchmarks/map_forecast.py [benchmarks/results/map-tiny]

Reads the folder's `advice-*.json` (written by `pods advise ... --output-dir`, copied there and committed before the
level's runs started). The arms: `pods` is advise's "PODS n -> m", `grpo-ds` its "GRPO m/m, dynamic sampling".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pods_rl.advice.forecast import Setup, bootstrap

ARMS = {"pods": "pods", "grpo-ds": "grpo-ds"}  # comparison arm: advise's method name
SETUP_FIELDS = ("n", "m", "prompts_per_step", "max_generation_rounds", "screen_size", "history_exploration")


def level_forecast(advice: dict) -> dict[str, dict[str, float]]:
    """{arm: {ratio, low, high}}: the signal per step over GRPO m/m's, from one advice.json."""
    sample = advice["sample"]
    setup = Setup(
        **{key: advice["setup"][key] for key in SETUP_FIELDS},
        history_prior=tuple(advice["setup"]["history_prior"]),
        generation_budget=advice["setup"]["generation_budget"],
    )
    samples = [sample["samples_per_prompt"]] * len(sample["successes"])
    intervals = bootstrap(sample["successes"], samples, setup)
    methods = {method["name"]: method for method in advice["methods"]}
    return {
        arm: {
            "ratio": methods[name]["versus_grpo"]["signal_per_step"],
            "low": intervals[name][0],
            "high": intervals[name][1],
        }
        for arm, name in ARMS.items()
    }


def main(folder: Path) -> None:
    print("| level | base pass rate (sampled) | arm | forecast signal per step vs GRPO 4/4 (95%) |")
    print("|---|---|---|---|")
    for path in sorted(
        folder.glob("advice-*.json"), key=lambda p: json.loads(p.read_text())["sample"]["mean_pass_rate"]
    ):
        advice = json.loads(path.read_text())
        options = ", ".join(f"{key}={value}" for key, value in advice.get("model_options", {}).items())
        level = options or path.stem.removeprefix("advice-")
        rate = advice["sample"]["mean_pass_rate"]
        for arm, figure in level_forecast(advice).items():
            print(
                f"| {level} | {rate:.1%} | {arm} | {figure['ratio']:.2f}x ({figure['low']:.2f}-{figure['high']:.2f}) |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results" / "map-tiny")
