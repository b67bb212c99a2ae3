"""Rollout allocation in PODSTrainer: the step's pools built by screening or from each prompt's history, instead of n
rollouts for every prompt (`pods_rl.core.allocation` decides; this module generates, gathers and lays out).

What a step builds, with G = the prompts each process trains per generation and P processes:

- `"screen"` (SPEED-RL): rounds of candidates (the loop's batch, then further batches of the training data drawn
  from the data stream, `pods_rl.trainer.refill`). Each round every process generates `screen_size` = k rollouts for
  each of its G candidates; the gathered rewards say which pass (`screen_passes`: a screen that varies, or whose
  pass rate lies in the band); `another_round_needed` decides on the pass masks of every process, so every process
  runs the same rounds. Every process then plans every process's step (`plan_screening`) and extends the same number
  E of prompts to n (the most that passed on any process, or all G when k < m): one more call of E * (n - k) rows.
  Screens of prompts not trained count as generated, and are dropped.
- `"history"` (GRESO, then Knapsack RL): rounds of candidates whose ids are gathered; the skip draws are made for
  every process's candidates in process order (so the history's generator stays the same on every process), until
  every process holds G candidates not skipped (or `max_generation_rounds`, or the epoch's end). Each process plans
  its G prompts' sizes (m..`max_rollouts_per_prompt`) by an exact knapsack adding up to its share of
  `generation_budget`, and generates them in one call; the gathered rewards are added to the history, in global order.
- Pass rates (the band, the history) count each rollout's weighted sum of the reward functions against
  `success_threshold`, whatever `multi_objective_aggregation` (`_weighted_rewards`); whether a group varies is read on
  the selection scores, which the update learns from (`_scores`).
- With `dynamic_sampling`, each such step is one round of dynamic sampling (`RolloutAllocator.build`).

Every generation call generates the same number of rows on every process (TRL's reward gather, vLLM server
slicing and ZeRO-3 generation need it). The result is one flat list of this process's rows (the calls' rows, in call
order), the gathered rewards in the same process-major order, and a (P * G, K) layout of the rows of each trained
prompt's pool (-1: padding): `PODSTrainer._down_sample` selects m of each pool on it. Pools never span processes, so
no row moves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object

from pods_rl.config_rules import allocation_objective
from pods_rl.core.allocation import (
    PassRateHistory,
    plan_from_history,
    plan_screening,
    prompt_id,
    screen_passes,
    size_histogram,
)
from pods_rl.core.dynamic_sampling import another_round_needed, informative_groups, plan_groups
from pods_rl.trainer.pools import selection_scores

STATE_FILE = "pods_allocation_state.pt"  # the pass-rate history, written by the main process into each checkpoint
HISTOGRAM_FILE = "rollouts_per_prompt.jsonl"  # one line per generation: how many prompts got 0, 1, 2, ... rollouts


class Pool:
    """One step's generated rows and how they form pools: what `PODSTrainer._down_sample` selects from."""

    def __init__(self, columns: dict, extra_fields: dict, rewards: torch.Tensor, layout: torch.Tensor, stats: dict):
        self.columns = columns  # this process's rows of every call, in call order (`_pool_columns` layout)
        self.extra_fields = extra_fields  # rollout_func's extra fields that are not per row (from the first call)
        self.rewards = rewards  # (P * rows, reward functions) gathered, process-major over the concatenated calls
        self.layout = layout  # (P * G, K) int64 rows of `rewards` in each trained prompt's pool, -1 padding
        self.stats = stats  # what the step generated, for the metrics


class RolloutAllocator:
    """The allocation of one trainer: builds each step's pool, keeps the history, saves and restores it."""

    def __init__(self, trainer: Any):  # a PODSTrainer (not imported: it imports this module)
        args = trainer.args
        self.trainer = trainer
        self.mode = args.rollout_allocation
        self.history = (
            PassRateHistory(
                prior_successes=args.history_prior_successes,
                prior_failures=args.history_prior_failures,
                success_threshold=args.success_threshold,
                decay=args.history_decay,
                exploration=args.history_exploration,
                seed=args.seed,
            )
            if self.mode == "history"
            else None
        )
        self.objective = (  # "auto" resolved against the advantage scaling
            allocation_objective(args.allocation_objective, args.scale_rewards, args.multi_objective_aggregation)
            if self.mode == "history"
            else None
        )
        self._step_start: dict[str, Any] | None = None

    # ------------------------------------------------------------------ state
    def note_step_start(self) -> None:
        """Remember the history where a step begins, to go back there if the step fails before its update."""
        self._step_start = self.history.state_dict() if self.history is not None else None

    def rewind(self) -> None:
        if self._step_start is not None:
            self.history.load_state_dict(self._step_start)

    def save(self, folder: Path) -> None:
        if self.history is not None:
            torch.save(self.history.state_dict(), folder / STATE_FILE)

    def load(self, folder: Path, step: int) -> None:
        """Restore the history saved in checkpoint `folder` (every process), and drop the histogram lines of steps
        after it, which the resumed run writes again (the main process)."""
        path = folder / STATE_FILE
        if self.history is not None and path.is_file():
            self.history.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        histogram = Path(self.trainer.args.output_dir) / HISTOGRAM_FILE
        if self.trainer.args.should_save and histogram.is_file():
            kept = [line for line in histogram.read_text().splitlines() if _histogram_step(line) <= step]
            histogram.write_text("".join(f"{line}\n" for line in kept))

    # ------------------------------------------------------------------ building the pool
    def build(self, prompts: list, inputs: list) -> Pool:
        """The step's pool from the loop's batch (`prompts`, `inputs`: this process's rows, n per prompt).

        With `dynamic_sampling`, each allocated step is one round of dynamic sampling: the trained pools whose
        scores are all equal are dropped, and further allocated steps (on further batches of the data) run until
        every process holds its groups, or `max_generation_rounds` rounds ran, or the epoch ends; a process still
        short fills up with the last round's dropped pools (`dynamic_sampling.plan_groups`)."""
        trainer = self.trainer
        n, processes = trainer.pool_size, trainer.accelerator.num_processes
        candidates = inputs[::n]
        steps, masks = [], []
        while True:
            steps.append(self._screen(candidates) if self.mode == "screen" else self._from_history(candidates))
            if not trainer.args.dynamic_sampling:
                return steps[0]
            masks.append(informative_groups(self._pool_scores(steps[-1])).view(processes, -1))
            if not another_round_needed(masks, trainer.args.max_generation_rounds):
                break
            batch = trainer._data_stream.draw()
            if batch is None:  # the epoch has no generation batch left (on every process alike)
                break
            candidates = batch[::n]
        return self._merged(steps, masks, plan_groups(masks))

    def _candidate_rounds(self, first: list[dict], decide) -> list[list[dict]]:
        """The rounds' candidates (this process's): the loop's, then drawn batches while `decide(round)` (called on
        every process with the round's candidates) says another round is needed."""
        rounds = [first]
        while decide(rounds[-1]):
            batch = self.trainer._data_stream.draw()
            if batch is None:  # the epoch has no generation batch left (on every process alike)
                break
            rounds.append(batch[:: self.trainer.pool_size])
        return rounds

    def _screen(self, first: list[dict]) -> Pool:
        trainer, args = self.trainer, self.trainer.args
        n, m, k = trainer.pool_size, trainer.num_selected, args.screen_size
        processes, process = trainer.accelerator.num_processes, trainer.accelerator.process_index
        groups = len(first)
        calls, passes, scores = [], [], []

        def screen(candidates: list[dict]) -> bool:
            call = trainer._generate_rows(_repeated(candidates, k), k)
            calls.append(call)
            round_scores = self._scores(call[1], k)
            band = tuple(args.screen_pass_rate_band) if args.screen_pass_rate_band is not None else None
            # A band reads pass rates (the weighted rewards); without one, a screen passes when it varies as the
            # update sees it (the selection scores, as dynamic sampling).
            signal = self._weighted_rewards(call[1], k) if band is not None else round_scores
            round_passes = screen_passes(signal, band=band, success_threshold=args.success_threshold)
            scores.append(round_scores.view(processes, groups, k))
            passes.append(round_passes.view(processes, groups))
            return another_round_needed(passes, args.max_generation_rounds)

        rounds = self._candidate_rounds(first, screen)
        screened, passed = torch.cat(scores, dim=1), torch.cat(passes, dim=1)
        plans = [plan_screening(screened[p], groups, n, m, passes=passed[p]) for p in range(processes)]
        extend = max(int((plan.sizes == n).sum()) for plan in plans)  # all G when k < m
        plans = [plan_screening(screened[p], groups, n, m, passes=passed[p], extend=extend) for p in range(processes)]
        candidates = [row for candidates in rounds for row in candidates]
        mine = plans[process]
        if extend:
            calls.append(trainer._generate_rows(_repeated([candidates[c] for c in mine.chosen[:extend]], n - k), n - k))
        screen_rows = len(rounds) * groups * k
        pools = []
        for plan in plans:
            pool = []
            for g, c in enumerate(plan.chosen.tolist()):
                rows = list(range(c * k, (c + 1) * k))  # round r's screens start at r * G * k: c * k
                if g < extend:
                    rows += range(screen_rows + g * (n - k), screen_rows + (g + 1) * (n - k))
                pool.append(rows)
            pools.append(pool)
        stats = {
            "rounds": len(rounds),
            "screened": processes * groups * len(rounds),
            "extended": processes * extend,
            "filled": sum(int((~plan.qualified).sum()) for plan in plans),
            "trained": processes * groups,
            "prompts_generated": processes * groups * len(rounds),
        }
        return self._pool(calls, pools, stats)

    def _from_history(self, first: list[dict]) -> Pool:
        trainer, args, history = self.trainer, self.trainer.args, self.history
        n, m = trainer.pool_size, trainer.num_selected
        processes, process = trainer.accelerator.num_processes, trainer.accelerator.process_index
        groups = len(first)
        ids, kept = [], []

        def skip(candidates: list[dict]) -> bool:
            round_ids = gather_object([prompt_id(row["prompt"]) for row in candidates])  # every process's, in order
            skipped = history.draw_skips(round_ids, n)
            ids.append([round_ids[p * groups : (p + 1) * groups] for p in range(processes)])
            kept.append(~skipped.view(processes, groups))
            return another_round_needed(kept, args.max_generation_rounds)

        rounds = self._candidate_rounds(first, skip)
        candidates = [row for candidates in rounds for row in candidates]
        budget = (args.generation_budget or processes * groups * n) // processes
        sizes = list(range(m, (args.max_rollouts_per_prompt or n) + 1))
        skipped = ~torch.cat(kept, dim=1)
        plans = []
        for p in range(processes):
            process_ids = [key for round_ids in ids for key in round_ids[p]]
            plan, _ = plan_from_history(
                history,
                process_ids,
                groups,
                sizes,
                budget,
                m,
                skip_at=n,
                objective=self.objective,
                skipped=skipped[p],
            )
            plans.append((plan, [process_ids[c] for c in plan.chosen.tolist()]))
        mine = plans[process][0]
        rows = [candidates[c] for c, size in zip(mine.chosen.tolist(), mine.sizes.tolist(), strict=True)]
        rows = [row for row, size in zip(rows, mine.sizes.tolist(), strict=True) for _ in range(size)]
        call = trainer._generate_rows(rows, 1)
        pools = []
        for plan, _ in plans:
            ends = plan.sizes.cumsum(0).tolist()
            pools.append([list(range(end - size, end)) for end, size in zip(ends, plan.sizes.tolist(), strict=True)])
        stats = {
            "rounds": len(rounds),
            "screened": 0,
            "extended": 0,
            "filled": sum(int((~plan.qualified).sum()) for plan, _ in plans),
            "trained": processes * groups,
            "candidates": processes * groups * len(rounds),
            "prompts_generated": processes * groups,
        }
        pool = self._pool([call], pools, stats)
        # The history learns from every trained prompt's pool, in global order (the same on every process).
        history.observe([key for _, chosen in plans for key in chosen], self._pool_scores(pool, self._weighted_rewards))
        return pool

    def _pool_scores(self, pool: Pool, scores: Callable | None = None) -> torch.Tensor:
        """(P * G, K) scores of a pool's layout, NaN at the padding: `scores(rewards, K)`, by default `_scores`."""
        padded = pool.rewards[pool.layout.clamp(min=0).flatten()]
        padded[(pool.layout < 0).flatten()] = torch.nan
        scores = scores if scores is not None else self._scores
        return scores(padded, pool.layout.shape[1])

    def _merged(self, steps: list[Pool], masks: list[torch.Tensor], plan: torch.Tensor) -> Pool:
        """One pool of the dynamic-sampling rounds' pools: every round's rows (call order), and the (round, group)
        that `plan` (P, G, 2) gives each process's slots."""
        processes, groups = plan.shape[:2]
        sizes = [len(step.columns["prompt"]) for step in steps]  # this process's rows of each round
        total, offsets = sum(sizes), torch.tensor([0, *sizes[:-1]]).cumsum(0).tolist()
        columns = {}
        for key in dict.fromkeys(key for step in steps for key in step.columns):
            values = [
                v for step, size in zip(steps, sizes, strict=True) for v in (step.columns.get(key) or [None] * size)
            ]
            columns[key] = None if all(value is None for value in values) else values
        rewards = torch.cat(
            [step.rewards.view(processes, size, -1) for step, size in zip(steps, sizes, strict=True)], 1
        )
        largest = max(step.layout.shape[1] for step in steps)
        layout = torch.full((processes * groups, largest), -1, dtype=torch.int64)
        for p in range(processes):
            for g, (r, group) in enumerate(plan[p].tolist()):
                rows = steps[r].layout[p * groups + group]
                rows = rows[rows >= 0] - p * sizes[r] + offsets[r] + p * total  # into the merged, process-major rows
                layout[p * groups + g, : len(rows)] = rows
        summed = ("rounds", "screened", "extended", "generated", "prompts_generated")
        stats = {key: sum(step.stats[key] for step in steps) for key in summed}
        candidates = sum(step.stats.get("candidates", step.stats["screened"]) for step in steps)
        informative = torch.stack(masks)  # (rounds, P, G)
        stats.update(
            trained=processes * groups,
            candidates=candidates,
            filled=sum(int(not informative[r, p, g]) for p in range(processes) for r, g in plan[p].tolist()),
            sizes=(layout >= 0).sum(dim=1),
            dynamic_rounds=len(steps),
        )
        return Pool(columns, steps[0].extra_fields, rewards.view(processes * total, -1), layout, stats)

    def _scores(self, rewards: torch.Tensor, size: int) -> torch.Tensor:
        """(groups, size) selection scores of gathered rewards, `size` consecutive rows per group: what says whether
        a group varies as the update sees it."""
        trainer = self.trainer
        weights = trainer.reward_weights.to(rewards.device)
        return selection_scores(rewards, weights, size, trainer.multi_objective_aggregation)[0]

    def _weighted_rewards(self, rewards: torch.Tensor, size: int) -> torch.Tensor:
        """(groups, size) weighted sums of the reward functions, NaN where unscorable: each rollout's pass signal,
        which `success_threshold`, the band and the history read. No aggregation rescales it: under
        normalize_then_sum the selection scores are normalised within each group (an always-solved group scores all
        0), which says nothing about a pass rate."""
        weights = self.trainer.reward_weights.to(rewards.device)
        return selection_scores(rewards, weights, size, "sum_then_normalize")[0]  # that aggregation's: the raw sum

    def _pool(self, calls: list[tuple], pools: list[list[list[int]]], stats: dict) -> Pool:
        """Concatenate the calls (this process's rows, and the gathered rewards process-major) and lay out every
        process's pools (lists of rows within its concatenated rows) as (P * G, K) global rows, -1 padding."""
        processes = self.trainer.accelerator.num_processes
        columns_of_calls = [call[0] for call in calls]
        local_rows = sum(len(columns["prompt"]) for columns in columns_of_calls)
        columns = {}
        for key in dict.fromkeys(key for call in columns_of_calls for key in call):
            values = [v for call in columns_of_calls for v in (call.get(key) or [None] * len(call["prompt"]))]
            columns[key] = None if all(value is None for value in values) else values
        rewards = torch.cat([call[1].view(processes, -1, call[1].shape[1]) for call in calls], dim=1).view(
            processes * local_rows, -1
        )
        largest = max(len(pool) for process_pools in pools for pool in process_pools)
        layout = torch.full((sum(map(len, pools)), largest), -1, dtype=torch.int64)
        sizes = []
        for p, process_pools in enumerate(pools):
            for g, pool in enumerate(process_pools):
                layout[p * len(process_pools) + g, : len(pool)] = torch.tensor(pool, dtype=torch.int64) + p * local_rows
                sizes.append(len(pool))
        stats = {**stats, "generated": processes * local_rows, "sizes": torch.tensor(sizes)}
        return Pool(columns, calls[0][2], rewards, layout, stats)

    # ------------------------------------------------------------------ metrics
    def log(self, metrics: dict[str, list], stats: dict, tokens: float) -> None:
        """The step's generation under `pods/` (counts summed over processes), and the main process's line of
        the histogram of rollouts per trained prompt."""
        sizes = stats["sizes"]
        candidates = stats.get("candidates", stats["screened"])
        metrics["pods/rollouts_generated"][-1] = float(stats["generated"])
        metrics["pods/tokens_generated"][-1] = float(tokens)
        metrics["pods/allocation_rounds"].append(float(stats["rounds"]))
        metrics["pods/prompts_screened"].append(float(stats["screened"]))
        metrics["pods/prompts_extended"].append(float(stats["extended"]))
        metrics["pods/prompts_skipped"].append(float(candidates - stats["trained"]))
        metrics["pods/prompts_filled"].append(float(stats["filled"]))
        metrics["pods/rollouts_per_prompt_min"].append(float(sizes.min()))
        metrics["pods/rollouts_per_prompt_mean"].append(sizes.double().mean().item())
        metrics["pods/rollouts_per_prompt_max"].append(float(sizes.max()))
        # What the comparison's refill table reads (as dynamic sampling's): rounds, prompts generated for, dropped.
        metrics["pods/generation_rounds"].append(float(stats["rounds"]))
        metrics["pods/prompts_generated"].append(float(stats["prompts_generated"]))
        metrics["pods/groups_dropped_frac"].append(1.0 - stats["trained"] / candidates)
        metrics["pods/rollouts_per_trained_row"].append(stats["generated"] / metrics["pods/rollouts_trained"][-1])
        trainer = self.trainer
        if trainer.args.should_save:
            line = {
                "step": trainer.state.global_step + 1,
                "histogram": size_histogram(sizes, int(sizes.max())).tolist(),
            }
            path = Path(trainer.args.output_dir) / HISTOGRAM_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as file:
                file.write(json.dumps(line) + "\n")


def _histogram_step(line: str) -> float:
    """The step of a histogram line; infinite for a line torn by a kill (dropped on resume)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf


def _repeated(rows: list[dict], times: int) -> list[dict]:
    return [row for row in rows for _ in range(times)]
