"""GSM8K and MATH loading through the real `datasets.load_dataset` path, fed small local files."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest

from pods_rl import rewards
from pods_rl.tasks import SYSTEM_PROMPT, load_task

PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")

FIXTURES = Path(__file__).parent.parent / "fixtures"
GSM8K_FILES = {"train": str(FIXTURES / "gsm8k_train.jsonl"), "test": str(FIXTURES / "gsm8k_test.jsonl")}
MATH_FILES = {"train": str(FIXTURES / "math_train.jsonl"), "test": str(FIXTURES / "math500_test.jsonl")}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Nothing here may reach the hub; each test gets its own datasets cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    return str(tmp_path / "cache")


def test_gsm8k_from_local_jsonl(offline: str) -> None:
    task = load_task("gsm8k", data_files=GSM8K_FILES, cache_dir=offline)
    assert task.name == "gsm8k"
    assert task.train["answer"] == ["7", "2234", "60"]  # the row without '####' is dropped, commas stripped
    assert task.test["answer"] == ["6", "180"]
    assert task.train[0]["prompt"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples does he have?"},
    ]
    assert task.system_prompt == SYSTEM_PROMPT
    assert task.reward_funcs == rewards.REWARD_FUNCS
    assert task.reward_weights == [1.0, 1.0, 1.0]


def test_gsm8k_from_parquet_and_limits(offline: str, tmp_path: Path) -> None:
    files = {}
    for split, path in GSM8K_FILES.items():
        files[split] = str(tmp_path / f"{split}.parquet")
        datasets.Dataset.from_json(path, cache_dir=offline).to_parquet(files[split])
    task = load_task("gsm8k", data_files=files, cache_dir=offline, num_train=2, num_test=1, seed=3)
    again = load_task("gsm8k", data_files=files, cache_dir=offline, num_train=2, num_test=1, seed=3)
    assert len(task.train) == 2 and task.train["answer"] == again.train["answer"]
    assert set(task.train["answer"]) <= {"7", "2234", "60"}
    assert task.test["answer"] == ["6"]
    assert task.options["num_train"] == 2 and task.options["seed"] == 3


def test_math_from_local_jsonl(offline: str) -> None:
    task = load_task("math", data_files=MATH_FILES, cache_dir=offline, system_prompt="Be brief.")
    assert task.train["answer"] == ["\\frac{3}{4}", "2", "\\{1,2\\}", "2\\sqrt{2}"]
    assert task.test["answer"] == ["10", "9", "(1,-1)"]  # the `answer` column, else the last \boxed{}
    assert task.train[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert task.test[0]["prompt"][1]["content"] == "Compute $\\dbinom{5}{2}$."


def test_math_gold_answers_are_gradable(offline: str) -> None:
    task = load_task("math", data_files=MATH_FILES, cache_dir=offline)
    said = ["<answer>0.75</answer>", "<answer>2</answer>", "<answer>\\{2, 1\\}</answer>", "\\boxed{\\sqrt{8}}"]
    assert rewards.accuracy(said, task.train["answer"]) == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("data_files", "message"),
    [
        ({"train": GSM8K_FILES["train"]}, "needs a 'test' entry"),
        ({"train": "train.txt", "test": "test.txt"}, "data_files must be one of"),
    ],
)
def test_bad_data_files(offline: str, data_files: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_task("gsm8k", data_files=data_files, cache_dir=offline)


def test_missing_column_is_named(offline: str, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"prompt": "What is 1 + 1?", "solution": "2"}) + "\n")
    with pytest.raises(ValueError, match=r"gsm8k train data lacks column\(s\) \['question', 'answer'\]"):
        load_task("gsm8k", data_files={"train": str(wrong), "test": str(wrong)}, cache_dir=offline)


def test_empty_split_is_refused(offline: str) -> None:
    with pytest.raises(ValueError, match="gsm8k test dataset is empty"):
        load_task("gsm8k", data_files=GSM8K_FILES, cache_dir=offline, num_test=0)


def test_empty_file_is_refused(offline: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"train data file .*empty.jsonl is empty"):
        load_task("gsm8k", data_files={"train": str(empty), "test": GSM8K_FILES["test"]}, cache_dir=offline)


def test_unreachable_hub_loads_in_offline_mode(offline: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a route to the hub, datasets is put in offline mode for the load (the cache, or an error at once, not
    after its retries), and left as it was."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    with pytest.raises(ConnectionError, match="OfflineModeIsEnabled"):
        load_task("gsm8k", cache_dir=offline)
    assert datasets.config.HF_HUB_OFFLINE is False and huggingface_hub.constants.HF_HUB_OFFLINE is False
