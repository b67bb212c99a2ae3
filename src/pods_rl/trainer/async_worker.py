"""The rollout worker's loop of TRL 1.16's asynchronous GRPO, with PODS's selection where each group is scored
(issue 67, in progress).

TRL's worker runs the loop class it holds as `AsyncRolloutWorker._loop_cls`, built with `_loop_kwargs`, in a
spawned process; the loop's `_score_group` scores one group of n completions and returns one sample per training row,
which it then queues for the trainer. `PODSRolloutLoop` keeps TRL's scoring (reward functions sync and async,
environment and rollout rewards, None handling) and returns only the rows `pods_rl.trainer.async_selection` keeps,
with PODS's advantages; a group dynamic sampling drops returns nothing, so it never reaches the queue. TRL's code is
not copied: the asynchronous trainer installs this class on its worker (`_loop_cls`) and adds `pods_selection` to
`_loop_kwargs`, as TRL's own `HarnessRolloutWorker` installs its loop.

Counters go to the trainer with the worker's metrics (`_push_metrics`, summed over a logging window by name):
`pods/groups_scored_total`, `pods/groups_dropped_total`, `pods/rollouts_generated_total`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, RolloutSample, _AsyncRolloutLoop

from pods_rl.trainer import stages
from pods_rl.trainer.async_selection import GroupSelection, select_samples


def selection_kwargs(
    settings: stages.SelectionSettings, weights: list[float], dynamic_sampling: bool, drop_limit: int, seed: int
) -> dict[str, Any]:
    """`pods_selection` for `_loop_kwargs`: plain data, since it is pickled into the worker's process."""
    return {
        "settings": dataclasses.asdict(settings),
        "weights": [float(weight) for weight in weights],
        "dynamic_sampling": dynamic_sampling,
        "drop_limit": drop_limit,
        "seed": seed,
    }


def group_selection(pods_selection: dict[str, Any]) -> GroupSelection:
    """The worker's `GroupSelection` from `selection_kwargs`' data; the random rule draws from a generator seeded
    with `seed`."""
    return GroupSelection(
        stages.SelectionSettings(**pods_selection["settings"]),
        torch.tensor(pods_selection["weights"], dtype=torch.float64),
        dynamic_sampling=pods_selection["dynamic_sampling"],
        drop_limit=pods_selection["drop_limit"],
        generator=torch.Generator().manual_seed(pods_selection["seed"]),
    )


class PODSRolloutLoop(_AsyncRolloutLoop):
    """TRL's rollout loop whose scored groups keep only PODS's selected rows (`pods_selection`: `selection_kwargs`)."""

    def __init__(self, *, pods_selection: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._selection = group_selection(pods_selection)

    async def _score_group(self, group: RolloutGroup) -> list[RolloutSample]:
        samples = await super()._score_group(group)
        rows = [len(sequences) for sequences in group.completions_sequences]
        tokens = [len(ids) for ids in group.completions_ids]
        kept, choice = select_samples(
            self._selection, samples, rows, tokens, self.reward_func_names, group.model_version
        )
        self._counters["pods/groups_scored_total"] += 1
        self._counters["pods/rollouts_generated_total"] += len(rows)
        if choice.dropped:
            self._counters["pods/groups_dropped_total"] += 1
        return kept
