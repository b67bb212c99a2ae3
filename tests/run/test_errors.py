"""Errors a user can meet: bad settings fail before any model loads, naming the setting and what is allowed;
failures during training name their cause, and a reward function's failure leaves a checkpoint behind."""

import json
import math
from pathlib import Path

import pytest
from support import char_tokenizer, make_trainer, vowel_reward
from typer.testing import CliRunner

import pods_rl.defaults
import pods_rl.models
import pods_rl.tasks
import pods_rl.trainer.config
from pods_rl.cli import _cli_overrides, app
from pods_rl.trainer.trainer import RewardError

runner = CliRunner()
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture
def no_model_loading(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("a model was loaded before the settings were checked")

    monkeypatch.setattr(pods_rl.models, "load_model", fail)


def gsm8k_with_train_file(tmp_path: Path, *rows: dict) -> list[str]:
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    files = {"train": str(train), "test": str(FIXTURES / "gsm8k_test.jsonl")}
    return ["--task", "gsm8k", "--set", f"task_options.data_files={json.dumps(files)}"]


def config_file(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return ["--config", str(path)]


CASES = {
    "m > n": (lambda tmp: ["-n", "4", "-m", "5"], ["num_selected (m)", "2 <= m <= num_generations", "got 5"]),
    "m < 1": (lambda tmp: ["-n", "4", "-m", "0"], ["num_selected (m)", "2 <= m <= num_generations", "got 0"]),
    "n < 2": (lambda tmp: ["-n", "1", "-m", "1"], ["num_generations (the pool size n) must be >= 2", "got 1"]),
    "unknown rule": (
        lambda tmp: ["--selection-rule", "best"],
        ["selection_rule must be one of", "max_variance", "'best'"],
    ),
    "unknown task": (lambda tmp: ["--task", "chess"], ["unknown task 'chess'", "arithmetic", "gsm8k"]),
    "unknown model": (lambda tmp: ["--model", "no-such-model"], ["Unknown model 'no-such-model'", "tiny"]),
    "missing column": (
        lambda tmp: gsm8k_with_train_file(tmp, {"problem": "1+1?", "answer": "#### 2"}),
        ["gsm8k train data lacks column(s) ['question']", "'problem'"],
    ),
    "empty dataset": (
        lambda tmp: gsm8k_with_train_file(tmp, {"question": "1+1?", "answer": "no final answer line"}),
        ["gsm8k train dataset is empty"],
    ),
    "malformed yaml": (
        lambda tmp: config_file(tmp, "trainer: {learning_rate: 1e-4\n"),
        ["run.yaml is not valid YAML"],
    ),
    "unknown key": (lambda tmp: config_file(tmp, "trainr: {}\n"), ["unknown key(s) ['trainr']", "allowed:", "trainer"]),
    "unknown trainer key": (
        lambda tmp: config_file(tmp, "trainer: {learning_rat: 1.0e-4}\n"),
        ["Unknown trainer setting(s) ['learning_rat']", "PODSConfig/GRPOConfig field"],
    ),
    "unknown task option": (
        lambda tmp: ["--set", "task_options.digitz=3"],
        ["unknown option(s) ['digitz'] for task 'arithmetic'", "digits"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_setting_fails_before_the_model_loads(case, no_model_loading, tmp_path):
    make_args, fragments = CASES[case]
    result = runner.invoke(app, ["train", "--output-dir", str(tmp_path / "run"), *make_args(tmp_path)])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())  # rich wraps long lines
    for fragment in fragments:
        assert fragment in output


def test_output_dir_of_another_run_is_refused(no_model_loading, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("model: tiny\n")
    result = runner.invoke(app, ["train", "--output-dir", str(out)])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "already holds files: pass --resume to continue that run or --overwrite to replace it" in output
    assert (out / "config.yaml").read_text() == "model: tiny\n"  # untouched


def test_resume_of_a_folder_without_a_run(no_model_loading, tmp_path):
    result = runner.invoke(app, ["train", "--resume", str(tmp_path)])
    assert result.exit_code == 2
    assert "no run there (config.yaml is missing)" in " ".join(result.output.split())


def test_failing_reward_names_function_and_sample_after_a_checkpoint(tiny_model_dir, tmp_path, monkeypatch):
    """A reward function that raises during step 2: the error names it and the sample; checkpoint-1 is saved."""

    def exploding(completions, trainer_state, **kwargs):
        if trainer_state.global_step >= 1:
            raise ZeroDivisionError("boom")
        return [0.0] * len(completions)

    load_task = pods_rl.tasks.load_task

    def task_with_exploding_reward(*args, **kwargs):
        task = load_task(*args, **kwargs)
        task.reward_funcs, task.reward_weights = [exploding], [1.0]
        return task

    monkeypatch.setattr(pods_rl.tasks, "load_task", task_with_exploding_reward)
    out = tmp_path / "run"
    quick = ["--set", "trainer.per_device_train_batch_size=4", "--set", "trainer.max_completion_length=8"]
    options = [
        "--set",
        "task_options.num_train=16",
        "--set",
        "task_options.num_test=4",
        "--set",
        "trainer.save_steps=5",
    ]
    args = ["--model", str(tiny_model_dir), "-n", "4", "-m", "2", "--max-steps", "3", *quick, *options]
    result = runner.invoke(app, ["train", "--output-dir", str(out), *args])
    assert isinstance(result.exception, RewardError), result.output
    message = str(result.exception)
    assert "Reward function 'exploding' raised ZeroDivisionError: boom on sample 0 (prompt " in message
    assert "completion " in message
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())] == [0, 1]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_reward_is_an_error_naming_the_prompt(tmp_path, bad):
    def unstable(completions, **kwargs):
        return [bad] + [0.5] * (len(completions) - 1)

    trainer = make_trainer(tmp_path, reward=unstable, num_generations=4, num_selected=2, max_steps=1)
    with pytest.raises(RewardError, match=rf"Reward function 'unstable' returned {bad!r} for sample 0 \(prompt 'q"):
        trainer.train()


def test_none_reward_still_means_not_applicable(tmp_path):
    """TRL's convention: None marks a sample a reward function does not apply to; it is not an error."""

    def partial(completions, **kwargs):
        return [None] + [0.5] * (len(completions) - 1)

    make_trainer(tmp_path, reward=[partial, vowel_reward], num_generations=4, num_selected=2, max_steps=1).train()


@pytest.mark.parametrize("case", ["empty", "truncated"])
def test_empty_and_truncated_completions_are_scored(tmp_path, case):
    """Completions that end at once (EOS first) or never (cut at the length limit) go through scoring and training."""
    tokenizer = char_tokenizer()
    others = [i for i in range(len(tokenizer)) if i != tokenizer.eos_token_id]
    suppress = others if case == "empty" else [tokenizer.eos_token_id]
    seen: list[tuple[str, list[int]]] = []

    def recording(completions, completion_ids, **kwargs):
        seen.extend(zip(completions, completion_ids, strict=True))
        return vowel_reward(completions)

    trainer = make_trainer(
        tmp_path,
        reward=recording,
        num_generations=4,
        num_selected=2,
        max_steps=1,
        generation_kwargs={"suppress_tokens": suppress},
    )
    trainer.train()
    assert seen
    if case == "empty":
        assert all(text == "" for text, _ in seen)
    else:
        eos, limit = tokenizer.eos_token_id, trainer.args.max_completion_length
        assert all(len(ids) == limit and eos not in ids for _, ids in seen)


def test_vllm_flag_sets_use_vllm():
    assert _cli_overrides(vllm=True) == [{"trainer": {"use_vllm": True}}]
    assert _cli_overrides(vllm=False) == [{"trainer": {"use_vllm": False}}]
    assert _cli_overrides(vllm=None) == []


def test_vllm_without_vllm_installed_fails_before_the_model_loads(no_model_loading, monkeypatch, tmp_path):
    monkeypatch.setattr(pods_rl.trainer.config, "vllm_installed", lambda: False)
    result = runner.invoke(app, ["train", "--vllm", "--output-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "use_vllm=True needs vLLM" in result.output and "make vllm" in result.output
