"""How much of a measured spread of log crossings is evaluation noise (docs/benchmarks/map-tiny.md, level 0.0's design).

A report's power "at the runs' spread" feeds the simulation the standard deviation over seeds of each run's log
crossing of the target. Part of that spread is the evaluation's binomial noise on a flat curve, not seeds learning at
different paces. This draws runs of the simulation (`pods_rl.compare.simulation.simulate_run`) with a known spread of
log time constants, measures their crossings as the report does (the first evaluation at or above the target,
interpolated from the one before), and prints the measured spread for each true one: read a report's measured spread
back to the seeds' own.

    python benchmarks/crossing_spread.py --base 0.499 --plateau 0.619 --reaches 0.984 --questions 400

Every 5 steps to 200 by default (the map's grid); the target is 75% of the gain.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

import numpy as np

from pods_rl.compare.power import crossing_spread
from pods_rl.compare.simulation import Design, simulate_run
from pods_rl.compare.statistics import time_to_target

SPREADS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6)


def measured_spread(design: Design, runs: int, fraction: float = 0.75, seed: int = 0) -> tuple[float, float]:
    """(standard deviation of the log crossings, share of runs that crossed after the start) over `runs` runs, each
    crossing found as a report finds it (`time_to_target`) and spread as a report's power reads it
    (`crossing_spread`)."""
    generator = np.random.default_rng(seed)
    target = design.base + fraction * design.gain
    crossings = [
        asdict(time_to_target(*simulate_run(generator, design, design.plateau, 1.0), target)) for _ in range(runs)
    ]
    spread, crossed = crossing_spread(crossings)
    return spread, crossed / runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=float, required=True, help="accuracy before training")
    parser.add_argument("--plateau", type=float, required=True, help="the baseline's plateau")
    parser.add_argument("--reaches", type=float, default=0.9, help="share of its gain the median run makes")
    parser.add_argument("--questions", type=int, default=400, help="draws an evaluation (questions x samples)")
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--horizon", type=float, default=200.0)
    parser.add_argument("--runs", type=int, default=4000)
    args = parser.parse_args(argv)
    if not 0 <= args.base < args.plateau <= 1:
        parser.error(f"need 0 <= base < plateau <= 1, got {args.base} and {args.plateau}")
    print(
        f"curve {args.base:.1%} -> {args.plateau:.1%}, {args.questions} draws an evaluation, every {args.every:g} "
        f"to {args.horizon:g}, the median run at {args.reaches:.1%} of its gain by the end; {args.runs} runs a row"
    )
    print("| seeds' spread of log time constants | measured spread of log crossings | runs crossing after the start |")
    print("|---|---|---|")
    for spread in SPREADS:
        design = Design(
            "crossing spread",
            every=args.every,
            horizon=args.horizon,
            base=args.base,
            plateau=args.plateau,
            step=0.0,
            questions=args.questions,
            spread=spread,
            reaches=args.reaches,
        )
        measured, crossed = measured_spread(design, args.runs)
        print(f"| {spread:.2f} | {measured:.2f} | {crossed:.0%} |")


if __name__ == "__main__":
    main()
