"""PODS on 2 and 4 CPU processes (gloo, DDP) and on 2 under FSDP2, ZeRO-2 and ZeRO-3 trains what one process trains
on the same global batch (the engines' configs: configs/accelerate/*-cpu.yaml).

`support.SCENARIOS` run with `scripted_rollouts`, whose rollouts depend on the global row, not on the process
count, so the pools are the same on 1, 2 and 4 processes. One launch per engine and process count runs every
scenario.
"""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from support import (
    SCENARIOS,
    char_tokenizer,
    config_launch,
    process_launch,
    run_launched,
    run_scenario,
    scripted_rollout,
)

SCRIPT = Path(__file__).with_name("multi_process_run.py")
CONFIGS = Path(__file__).parents[2] / "configs" / "accelerate"
NEEDS_DEEPSPEED = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (pip install deepspeed; on a CPU it also needs g++, see docs/reliability.md)",
)
# What each engine wraps the model in, and whether every process holds only a shard of each parameter.
WRAPPERS = {
    "ddp": ("DistributedDataParallel", False),
    "fsdp2": ("FSDPLlamaForCausalLM", True),
    "zero2": ("DeepSpeedEngine", False),
    "zero3": ("DeepSpeedEngine", True),
}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(("ddp", 2), id="ddp-2-processes"),
        pytest.param(("ddp", 4), id="ddp-4-processes"),
        pytest.param(("fsdp2", 2), id="fsdp2-2-processes"),
        pytest.param(("zero2", 2), id="zero2-2-processes", marks=NEEDS_DEEPSPEED),
        pytest.param(("zero3", 2), id="zero3-2-processes", marks=NEEDS_DEEPSPEED),
    ],
)
def launched(request, tmp_path_factory):
    engine, world = request.param
    out = tmp_path_factory.mktemp(f"{engine}-world{world}")
    launch = process_launch(world) if engine == "ddp" else config_launch(CONFIGS / f"{engine}-cpu.yaml")
    run_launched(launch, SCRIPT, str(out))
    return engine, world, out


def test_engine_wraps_the_model(launched):
    """Each engine's own wrapper; under FSDP2 and ZeRO-3 every process holds a shard of each parameter, not a copy."""
    engine, world, out = launched
    for scenario in [*SCENARIOS, "resumed"]:
        for rank in range(world):
            record = json.loads((out / scenario / f"rank{rank}.json").read_text())
            assert (record["wrapper"], record["sharded"]) == WRAPPERS[engine]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_same_training_as_one_process(launched, scenario, tmp_path):
    _, world, out = launched
    ranks = [json.loads((out / scenario / f"rank{r}.json").read_text()) for r in range(world)]
    reference = run_scenario(scenario, tmp_path, num_processes=1, world_size=world)
    settings = SCENARIOS[scenario]
    share = settings["per_device_train_batch_size"]
    local_pool = share * settings["num_generations"] // settings["num_selected"]
    tokenizer = char_tokenizer()

    for generation, expected in enumerate(reference["generations"]):
        trained = [rank["generations"][generation] for rank in ranks]
        assert [len(t["tags"]) for t in trained] == [share] * world  # the invariant: a fixed share each
        # Concatenated in rank order, the shares are the one-process batch: same rows, same order, same advantages.
        assert [tag for t in trained for tag in t["tags"]] == expected["tags"]
        assert [c for t in trained for c in t["completion_ids"]] == expected["completion_ids"]
        advantages = [a for t in trained for a in t["advantages"]]
        assert advantages == pytest.approx(expected["advantages"], abs=1e-6)
        # Completion ids, log-probs and the extra field of every row (moved or not) arrived intact.
        for t in trained:
            rollouts = [scripted_rollout(tokenizer, tag) for tag in t["tags"]]
            assert t["completion_ids"] == [ids for ids, _ in rollouts]
            assert t["logprobs"] == [pytest.approx(logprobs, abs=1e-6) for _, logprobs in rollouts]
        moved = sum((tag % 1000) // local_pool != rank for rank, t in enumerate(trained) for tag in t["tags"])
        assert ranks[0]["rows_moved"][generation] == moved  # logged once per generation
        if scenario == "local":
            assert moved == 0
    if scenario == "spanning":
        assert any(ranks[0]["rows_moved"])  # pools that span processes did move rows

    assert ranks[0]["losses"] == pytest.approx(reference["losses"], rel=1e-4, abs=1e-6)
    for rank in ranks:
        for name, value in reference["params"].items():
            torch.testing.assert_close(torch.tensor(rank["params"][name]), torch.tensor(value), rtol=1e-4, atol=1e-6)
    # The completions table (rank 0) lists the last generation's trained rows with their log_extra column and the
    # advantages that were used.
    last = [rank["generations"][-1] for rank in ranks]
    assert ranks[0]["table_tags"] == [tag for t in last for tag in t["tags"]]
    assert ranks[0]["table_advantages"] == pytest.approx([a for t in last for a in t["advantages"]], abs=1e-6)


def test_resume_draws_what_the_uninterrupted_run_drew(launched):
    """Resumed from the checkpoint after step 1 on every process, the random rule draws the same rollouts (the
    selection generator is restored everywhere) and training ends where the uninterrupted run ended."""
    _, world, out = launched
    for rank in range(world):
        whole = json.loads((out / "local" / f"rank{rank}.json").read_text())
        resumed = json.loads((out / "resumed" / f"rank{rank}.json").read_text())
        assert resumed["generations"] == whole["generations"][1:]
        assert resumed["losses"] == pytest.approx(whole["losses"], rel=1e-6)  # the checkpoint's history, then step 2
        for name, value in whole["params"].items():
            torch.testing.assert_close(torch.tensor(resumed["params"][name]), torch.tensor(value))
