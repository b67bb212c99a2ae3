"""PODS on two processes (gloo, CPU): selection sees each prompt's whole pool, split across the processes."""

import json
from pathlib import Path

import pytest
import torch
from support import run_launched, two_process_launch

from pods_rl import select_batch, select_rollouts

SCRIPT = Path(__file__).with_name("two_process_run.py")


def run_two_processes(tmp_path, *options: str) -> list[dict]:
    run_launched(two_process_launch(), SCRIPT, str(tmp_path), *options, timeout=300)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_selection_spans_processes(tmp_path):
    ranks = run_two_processes(tmp_path)
    assert ranks[0]["params_sum"] == pytest.approx(ranks[1]["params_sum"], rel=1e-9)  # replicas stay in sync
    for generation in range(2):
        pool = torch.tensor(ranks[0]["pools"][generation] + ranks[1]["pools"][generation], dtype=torch.float64)
        assert pool.numel() == 8  # each process generated half of the prompt's pool
        expected = sorted(pool[select_rollouts(pool.view(1, 8), 2)[0]].tolist())
        trained = [ranks[r]["trained"][generation] for r in (0, 1)]
        assert [len(t["rewards"]) for t in trained] == [1, 1]  # an equal, non-empty share each
        assert sorted(trained[0]["rewards"] + trained[1]["rewards"]) == pytest.approx(expected)
        advantages = trained[0]["advantages"] + trained[1]["advantages"]
        if expected[0] != expected[1]:
            assert sorted(advantages) == pytest.approx([-(0.5**0.5), 0.5**0.5], rel=1e-3)


def test_batch_budget_spreads_each_process_rows_over_its_own_prompts(tmp_path):
    ranks = run_two_processes(tmp_path, "batch")
    assert ranks[0]["params_sum"] == pytest.approx(ranks[1]["params_sum"], rel=1e-9)
    for generation in range(2):
        for rank in ranks:
            pool = torch.tensor(rank["pools"][generation], dtype=torch.float64).view(2, 4)  # its own 2 whole pools
            trained = rank["trained"][generation]
            assert len(trained["rewards"]) == 4  # exactly per_device_train_batch_size rows on every process
            assert sorted(trained["rewards"]) == pytest.approx(sorted(pool[select_batch(pool, 4)].tolist()))
