"""The rollout worker's loop of TRL 1.16's asynchronous GRPO, with PODS's selection where each group is scored
(docs/async.md).

TRL's worker runs the loop class it holds as `AsyncRolloutWorker._loop_cls`, built with `_loop_kwargs`, in a
spawned process; the loop's `_score_group` scores one group of n completions and returns one sample per training row,
which it then queues for the trainer. `PODSRolloutLoop` keeps TRL's scoring (reward functions sync and async,
environment and rollout rewards, None handling) and returns only the rows `pods_rl.trainer.async_selection` keeps,
with PODS's advantages; a group dynamic sampling drops returns nothing, so it never reaches the queue. TRL's code is
not copied: the asynchronous trainer installs this class on its worker (`_loop_cls`) and adds `pods_selection` to
`_loop_kwargs`, as TRL's own `HarnessRolloutWorker` installs its loop.

Counters go to the trainer with the worker's metrics (`_push_metrics`, summed over a logging window by name):
`pods/groups_scored_total`, `pods/groups_dropped_total`, `pods/rollouts_generated_total`.

With a `record` path, each scored group is appended to it as one JSON line (`GROUP_RECORD_KEYS`): the worker's start
position in the dataset and the group's id (TRL numbers groups from 0 at each start), the policy version that
generated it, its rewards per function, completion tokens, the completions kept and their advantages, and whether
dynamic sampling dropped it. The trainer reads the dropped ids back when it checkpoints (a dropped group counts as
done for resume), and a reader can re-select every group from its rewards (`pods_rl.trainer.stages`) to check what
was queued.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import torch
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, RolloutSample, _AsyncRolloutLoop

from pods_rl.trainer import stages
from pods_rl.trainer.async_selection import GroupSelection, rewards_of, take_rows

GROUP_RECORD_KEYS = ("start", "group", "version", "rewards", "tokens", "kept", "advantages", "dropped")


def selection_kwargs(
    settings: stages.SelectionSettings,
    weights: list[float],
    dynamic_sampling: bool,
    drop_limit: int,
    seed: int,
    record: str | None = None,
    unseeded_requests: bool = False,
) -> dict[str, Any]:
    """`pods_selection` for `_loop_kwargs`: plain data, since it is pickled into the worker's process. `record`: the
    file each scored group is appended to (None: none). `unseeded_requests`: send completion requests without TRL's
    per-request seed (`PODSRolloutLoop._post`)."""
    return {
        "settings": dataclasses.asdict(settings),
        "weights": [float(weight) for weight in weights],
        "dynamic_sampling": dynamic_sampling,
        "drop_limit": drop_limit,
        "seed": seed,
        "record": record,
        "unseeded_requests": unseeded_requests,
    }


def read_group_records(path: Path) -> list[dict[str, Any]]:
    """The groups a worker recorded in `path` (none if absent); a line being written (torn) is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


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
        self._record = pods_selection.get("record")
        self._start = kwargs.get("dataset_start_index", 0)
        self._unseeded = pods_selection.get("unseeded_requests", False)

    async def _post(self, path: str, payload: dict, timeout: float, max_retries: int = 3) -> dict:
        """TRL's request, without its per-request sampling seed where `unseeded_requests` says. vLLM 0.31's CPU worker
        cannot rewind a seeded request's generator (`set_offset`: "CPU Generator does not use offset"), which it
        does when it recomputes a request the trainer's `/pause?mode=keep` held, and its engine dies. The seed keeps
        the samples of data-parallel engines apart; a CPU server runs one engine, whose own generator serves."""
        if self._unseeded and "seed" in payload:
            payload = {key: value for key, value in payload.items() if key != "seed"}
        return await super()._post(path, payload, timeout, max_retries)

    async def _score_group(self, group: RolloutGroup) -> list[RolloutSample]:
        samples = await super()._score_group(group)
        rows = [len(sequences) for sequences in group.completions_sequences]
        tokens = [len(ids) for ids in group.completions_ids]
        rewards = rewards_of(samples, rows, self.reward_func_names)
        choice = self._selection.choose(rewards, tokens, group.model_version)
        kept = take_rows(choice, samples, rows)
        self._counters["pods/groups_scored_total"] += 1
        self._counters["pods/rollouts_generated_total"] += len(rows)
        if choice.dropped:
            self._counters["pods/groups_dropped_total"] += 1
        if self._record is not None:
            values = [[None if math.isnan(value) else value for value in row] for row in rewards.tolist()]
            record = (self._start, group.group_id, group.model_version, values, tokens, choice.kept,
                      choice.advantages, choice.dropped)  # fmt: skip
            with open(self._record, "a") as file:  # one write of one line: a reader sees it whole or torn, skipped
                file.write(json.dumps(dict(zip(GROUP_RECORD_KEYS, record, strict=True))) + "\n")
        return kept
