"""reasoning-gym tasks: offline generation, disjoint splits, and scoring by each dataset's own scorer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import reasoning_gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pods_rl import rewards
from pods_rl.tasks import Task, load_task
from pods_rl.tasks.gym import load_reasoning_gym
from pods_rl.tasks.names import REASONING_GYM_DATASETS

# Datasets that cannot be built from a name and a size alone.
NEEDS_CONFIG = {"composite": "composes other datasets: needs a config listing them"}


def completion(answer: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"<think>\nworking\n</think>\n<answer>\n{answer}\n</answer>"}]


@pytest.mark.parametrize("name", ["basic_arithmetic", "gsm_symbolic"])
def test_gym_task_scores_its_own_answers(name: str) -> None:
    task = load_task(f"reasoning-gym:{name}", num_train=6, num_test=4, seed=1)
    assert task.name == f"reasoning-gym:{name}"
    assert (len(task.train), len(task.test)) == (6, 4)
    assert {"prompt", "answer", "rg_entry"} <= set(task.train.column_names)
    assert [f.__name__ for f in task.reward_funcs] == ["accuracy", "format", "tags"]
    assert task.reward_funcs[1:] == [rewards.format, rewards.tags]
    accuracy = task.reward_funcs[0]
    for split in (task.train, task.test):
        gold = [completion(a) for a in split["answer"]]
        assert accuracy(gold, answer=split["answer"], rg_entry=split["rg_entry"]) == [1.0] * len(split)
        wrong = [completion("definitely wrong") for _ in split["answer"]]
        assert accuracy(wrong, answer=split["answer"], rg_entry=split["rg_entry"]) == [0.0] * len(split)


def test_gym_splits_are_disjoint_and_reproducible() -> None:
    task = load_task("reasoning-gym:basic_arithmetic", num_train=50, num_test=20, seed=7)
    again = load_task("reasoning-gym:basic_arithmetic", num_train=50, num_test=20, seed=7)
    questions = [p[-1]["content"] for p in task.train["prompt"]]
    assert not set(questions) & {p[-1]["content"] for p in task.test["prompt"]}
    assert questions == [p[-1]["content"] for p in again.train["prompt"]]
    assert task.options == {
        "num_train": 50,
        "num_test": 20,
        "seed": 7,
        "config": {},
        "system_prompt": task.system_prompt,
    }


def test_gym_config_reaches_the_dataset() -> None:
    task = load_task("reasoning-gym:basic_arithmetic", num_train=3, num_test=1, config={"min_terms": 5, "max_terms": 5})
    for entry in task.train["rg_entry"]:
        assert json.loads(entry)["metadata"]["num_terms"] == 5
    with pytest.raises(ValueError, match="through the options"):
        load_task("reasoning-gym:basic_arithmetic", config={"seed": 1})
    with pytest.raises(ValueError, match="'basic_arithmetic' refused"):
        load_task("reasoning-gym:basic_arithmetic", config={"difficulty": "hard"})
    with pytest.raises(ValueError, match="basic_arithmetic"):
        load_task("reasoning-gym:basic_arithmetic", num_train=2, num_test=0)


def test_unknown_gym_dataset_lists_the_names() -> None:
    with pytest.raises(ValueError, match=r"unknown reasoning-gym dataset 'nope'; available: .*gsm_symbolic"):
        load_task("reasoning-gym:nope")
    with pytest.raises(ValueError, match=r"unknown reasoning-gym dataset 'nope'; available: .*gsm_symbolic"):
        load_reasoning_gym("nope")


def test_answers_that_could_run_code_are_never_scored(tmp_path: Path) -> None:
    # string_insertion's scorer evals answers that are not exactly right.
    task = load_task("reasoning-gym:string_insertion", num_train=1, num_test=1)
    marker = tmp_path / "pwned"
    attacks = [f"open({str(marker)!r}, 'w')", f"__import__('pathlib').Path({str(marker)!r}).touch()"]
    entries = list(task.train["rg_entry"]) * 2
    scores = task.reward_funcs[0]([completion(a) for a in attacks], answer=["?", "?"], rg_entry=entries)
    assert scores == [0.0, 0.0]
    assert not marker.exists()


@pytest.fixture(scope="module")
def spiral_task() -> Task:
    """spiral_matrix's scorer evals answers: the riskiest one to fuzz."""
    return load_task("reasoning-gym:spiral_matrix", num_train=1, num_test=1)


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(alphabet=st.sampled_from("[]()'\",0123456789 abc_.<>/answer"), max_size=80), max_size=3))
def test_fuzz_gym_accuracy_returns_floats(spiral_task: Task, texts: list[str]) -> None:
    entries = list(spiral_task.train["rg_entry"]) * len(texts)
    scores = spiral_task.reward_funcs[0](texts, answer=[""] * len(texts), rg_entry=entries)
    assert len(scores) == len(texts) and all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("name", REASONING_GYM_DATASETS)
def test_every_gym_dataset_builds_a_tiny_task(name: str) -> None:
    if name in NEEDS_CONFIG:
        pytest.skip(NEEDS_CONFIG[name])
    try:
        task = load_task(f"reasoning-gym:{name}", num_train=2, num_test=2)
    except ImportError as error:
        pytest.skip(f"{name} needs an optional dependency that is not installed: {error}")
    entries = [json.loads(e) for e in task.train["rg_entry"]]
    said = [e["answer"].strip() if isinstance(e["answer"], str) else "" for e in entries]
    accuracy = task.reward_funcs[0]
    scores = accuracy([completion(a) for a in said], answer=task.train["answer"], rg_entry=task.train["rg_entry"])
    scorer = reasoning_gym.create_dataset(name, seed=0, size=1)
    expected = [float(scorer.score_answer(a or None, e)) for a, e in zip(said, entries, strict=True)]
    assert scores == pytest.approx([min(max(s, 0.0), 1.0) for s in expected])
