"""The task registry: names, shared options, option checking and dataset checks."""

from __future__ import annotations

import pytest
from datasets import Dataset

from pods_rl import rewards
from pods_rl.tasks import SYSTEM_PROMPT, Task, list_tasks, load_task
from pods_rl.tasks.registry import check_dataset

GYM = "reasoning-gym:basic_arithmetic"


def test_list_tasks_names_every_task_with_a_description() -> None:
    tasks = dict(list_tasks())
    assert list(tasks) == ["arithmetic", "arithmetic-3term", "gsm8k", "math", "reasoning-gym:<name>"]
    assert all(isinstance(d, str) and d and "\n" not in d for d in tasks.values())


def test_arithmetic_is_the_default() -> None:
    pytest.importorskip("pods_rl.tasks.arithmetic")
    task = load_task(num_train=4, num_test=2)
    assert isinstance(task, Task) and task.name == "arithmetic"
    assert task.train[0]["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}


def test_unknown_task_lists_the_tasks() -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown task 'gsm9k' \(did you mean 'gsm8k'\?\); available: arithmetic, arithmetic-3term, gsm8k, math",
    ):
        load_task("gsm9k")


@pytest.mark.parametrize("name", ["arithmetic-3term", "gsm8k", "math", GYM])
def test_unknown_option_lists_the_options(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['num_trian'\].*'num_train'.*'reward_weights'"):
        load_task(name, num_trian=3)


def test_common_options_on_a_generated_task() -> None:
    task = load_task(GYM, num_train=3, num_test=2, seed=5, system_prompt="Answer fast.")
    assert (len(task.train), len(task.test)) == (3, 2)
    assert task.system_prompt == "Answer fast."
    assert {p[0]["content"] for p in task.train["prompt"]} == {"Answer fast."}
    assert task.reward_weights == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("weights", "expected"),
    [([1.0, 0.0, 0.5], [1.0, 0.0, 0.5]), ({"format": 0.0}, [1.0, 0.0, 1.0]), ((2, 1, 1), [2.0, 1.0, 1.0])],
)
def test_reward_weights_override(weights: object, expected: list[float]) -> None:
    task = load_task(GYM, num_train=2, num_test=1, reward_weights=weights)
    assert task.reward_weights == expected
    assert task.options["reward_weights"] == expected


@pytest.mark.parametrize(
    ("weights", "message"), [([1.0, 1.0], "needs 3 values"), ({"style": 1.0}, "unknown rewards \\['style'\\]")]
)
def test_bad_reward_weights(weights: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_task(GYM, num_train=2, num_test=1, reward_weights=weights)


def test_check_dataset_names_the_problem() -> None:
    good = Dataset.from_dict({"prompt": [[{"role": "user", "content": "1+1?"}]], "answer": ["2"]})
    check_dataset(good, "mine train")
    with pytest.raises(ValueError, match=r"mine train dataset lacks column\(s\) \['answer'\]"):
        check_dataset(good.remove_columns("answer"), "mine train")
    with pytest.raises(ValueError, match="mine test dataset is empty"):
        check_dataset(good.select([]), "mine test")


def test_reward_functions_have_clear_names() -> None:
    assert [f.__name__ for f in rewards.REWARD_FUNCS] == ["accuracy", "format", "tags"]
