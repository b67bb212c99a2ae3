"""Errors a user can meet: bad settings fail before any model loads, naming the setting and what is allowed;
failures during training name their cause, and a reward function's failure leaves a checkpoint behind."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import char_tokenizer, make_trainer, vowel_reward
from typer.testing import CliRunner

import pods_rl.defaults
import pods_rl.models
import pods_rl.run.folders
import pods_rl.tasks
import pods_rl.versions
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


ALLOCATE_SCREEN = ["--set", "trainer.rollout_allocation=screen"]
ALLOCATE_HISTORY = ["--set", "trainer.rollout_allocation=history"]
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
    "unknown key": (
        lambda tmp: config_file(tmp, "trainr: {}\n"),
        [
            "run.yaml: unknown key trainr (did you mean 'trainer'?); allowed: model, task, task_options, "
            "model_options, lora, trainer"
        ],
    ),
    "unknown trainer key": (
        lambda tmp: config_file(tmp, "trainer: {learning_rat: 1.0e-4}\n"),
        ["unknown key trainer.learning_rat (did you mean 'learning_rate'?)", "PODSConfig (TRL GRPOConfig) field"],
    ),
    "seed not an integer": (
        lambda tmp: ["--set", "seed=abc"],
        ["settings: seed: input should be a valid integer, got 'abc'"],
    ),
    "negative seed": (lambda tmp: ["--set", "seed=-1"], ["seed: input should be greater than or equal to 0, got -1"]),
    "model as a mapping": (lambda tmp: ["--set", "model.x=1"], ["model: input should be a valid string, got {'x': 1}"]),
    "unknown lora key": (
        lambda tmp: ["--set", "lora.foo=1"],
        ["unknown key lora.foo; each key is a peft.LoraConfig field"],
    ),
    "lora rank not an integer": (lambda tmp: ["--set", "lora.r=big"], ["lora.r: expected int, got 'big'"]),
    "eval every negative": (
        lambda tmp: ["--set", "eval.every_steps=-3"],
        ["eval.every_steps: input should be greater than or equal to 1, got -3"],
    ),
    "eval batch size zero": (
        lambda tmp: ["--set", "eval.batch_size=0"],
        ["eval.batch_size: input should be greater than or equal to 1, got 0"],
    ),
    "unknown eval key": (
        lambda tmp: ["--set", "eval.every_step=3"],
        ["unknown key eval.every_step (did you mean 'every_steps' or 'every_seconds'?); allowed: every_steps"],
    ),
    "trainer value of the wrong type": (
        lambda tmp: ["--set", "trainer.num_generations=abc"],
        ["trainer.num_generations: expected int | None, got 'abc'"],
    ),
    "trainer flag not a bool": (
        lambda tmp: ["--set", "trainer.bf16=maybe"],
        ["trainer.bf16: expected bool | None, got 'maybe'"],
    ),
    "time budget zero": (lambda tmp: ["--time-budget", "0"], ["time_budget: input should be greater than 0, got 0.0"]),
    "override without a value": (
        lambda tmp: ["--set", "trainer.beta"],
        ["Override 'trainer.beta' must look like KEY=VALUE"],
    ),
    "missing data file": (
        lambda tmp: ["--task", "gsm8k", "--set", f"task_options.data_files={{train: {tmp}/none.jsonl}}"],
        ["task_options: data_files['train']: no file", "none.jsonl", "task_options.data_files='{train: train.jsonl"],
    ),
    "data files not a mapping": (
        lambda tmp: ["--task", "gsm8k", "--set", "task_options.data_files=train.jsonl"],
        ["data_files must map each split to its files", "got 'train.jsonl'"],
    ),
    "unknown task option": (
        lambda tmp: ["--set", "task_options.digitz=3"],
        ["unknown option(s) ['digitz'] for task 'arithmetic'", "digits"],
    ),
    "screen of the whole pool": (
        lambda tmp: ["-n", "8", "-m", "4", *ALLOCATE_SCREEN, "--set", "trainer.screen_size=8"],
        ["trainer.screen_size must satisfy 2 <= screen_size < num_generations (n=8), got 8"],
    ),
    "exploration not a probability": (
        lambda tmp: [*ALLOCATE_HISTORY, "--set", "trainer.history_exploration=1.5"],
        ["trainer.history_exploration must be a probability in [0, 1], got 1.5"],
    ),
    "budget below the trained rows": (
        lambda tmp: [*ALLOCATE_HISTORY, "--set", "trainer.generation_budget=1"],
        ["trainer.generation_budget (1) is below the rows trained per generation"],
    ),
    "allocation in asynchronous training": (
        lambda tmp: ["--async", *ALLOCATE_SCREEN, "--set", "trainer.screen_size=4"],
        ["trainer.rollout_allocation='screen' cannot apply to asynchronous training", "generates n for every prompt"],
    ),
    "in-process vLLM in asynchronous training": (
        lambda tmp: ["--async", "--vllm"],
        ["trainer.use_vllm: asynchronous training generates on its vLLM server; drop it"],
    ),
    "staleness negative": (
        lambda tmp: ["--async", "--set", "asynchronous.max_staleness=-1"],
        ["asynchronous.max_staleness: input should be greater than or equal to 0, got -1"],
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


@pytest.mark.parametrize("case", list(CASES))
def test_bad_setting_is_one_line_without_traceback(case, no_model_loading, tmp_path):
    result = runner.invoke(app, ["train", "--output-dir", str(tmp_path / "run"), *CASES[case][0](tmp_path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # nothing was created either


HEAVY_MODULES = ("torch", "transformers", "trl", "datasets", "reasoning_gym", "vllm", "peft")
OFFLINE = {"HF_ENDPOINT": "https://hub.invalid"}  # .invalid never resolves (RFC 2606)
FAST_CASES = {
    "exploration not a probability": (
        [*ALLOCATE_HISTORY, "--set", "trainer.history_exploration=-0.5"],
        {},
        "settings: trainer.history_exploration must be a probability in [0, 1], got -0.5.",
    ),
    "trainer value of the wrong type": (
        ["--set", "trainer.num_generations=abc"],
        {},
        "settings: trainer.num_generations: expected int | None, got 'abc'.",
    ),
    "unknown task": (
        ["--task", "nosuchtask"],
        {},
        "settings: task: unknown task 'nosuchtask'; available: arithmetic, arithmetic-3term, gsm8k, math, "
        "reasoning-gym:<name>.",
    ),
    "unknown reasoning-gym dataset": (
        ["--task", "reasoning-gym:gsm_symbolc"],
        {},
        "settings: task: unknown reasoning-gym dataset 'gsm_symbolc' (did you mean 'gsm_symbolic'?); available: ab, "
        "acre, advanced_geometry,",
    ),
    "m > n": (
        ["-n", "4", "-m", "5"],
        {},
        "settings: trainer.num_selected (m) must satisfy 2 <= m <= num_generations (n=4), got 5: a group of one has "
        "zero variance",
    ),
    "m > the default n": (["-m", "32"], {}, "trainer.num_selected (m) must satisfy 2 <= m <= num_generations (n=16)"),
    "n < 2": (["-n", "1", "-m", "1"], {}, "settings: trainer.num_generations (the pool size n) must be >= 2, got 1."),
    "unknown rule": (
        ["--selection-rule", "best"],
        {},
        "settings: trainer.selection_rule must be one of ('max_variance', 'max_reward', 'random'), got 'best'.",
    ),
    "unknown advantage stats": (
        ["--set", "trainer.advantage_stats=all"],
        {},
        "settings: trainer.advantage_stats must be one of ('selected', 'pool'), got 'all'.",
    ),
    "batch budget with another rule": (
        ["--set", "trainer.selection_budget=batch", "--selection-rule", "random"],
        {},
        "settings: trainer.selection_budget='batch' needs selection_rule='max_variance' (it optimises the selected "
        "variance), got selection_rule='random'.",
    ),
    "tie break with another rule": (
        ["--set", "trainer.selection_tie_break=shortest", "--selection-rule", "max_reward"],
        {},
        "trainer.selection_tie_break='shortest' needs selection_rule='max_variance'",
    ),
    "trained rows not a multiple of m": (
        ["-m", "3"],
        {},
        "settings: trainer.per_device_train_batch_size * steps_per_generation * processes (64 * 1), the rows trained "
        "per generation, must be divisible by num_selected (m=3)",
    ),
    "rollouts not whole per process": (
        ["-n", "3", "-m", "2", "--set", "trainer.per_device_train_batch_size=1"],
        {"WORLD_SIZE": "2"},
        "settings: trainer.per_device_train_batch_size * steps_per_generation (1) * num_generations (3) must be "
        "divisible by num_selected (2), so that each process generates a whole number of rollouts.",
    ),
    "batch budget with pools across processes": (
        [
            "-n",
            "8",
            "-m",
            "4",
            "--set",
            "trainer.per_device_train_batch_size=2",
            "--set",
            "trainer.selection_budget=batch",
        ],
        {"WORLD_SIZE": "2"},
        "settings: trainer.selection_budget='batch' spreads each process's rows over its own prompts, so every "
        "prompt's pool must lie on one process: per_device_train_batch_size * steps_per_generation (2) must be a "
        "multiple of num_selected (4).",
    ),
    "lora rank negative": (
        ["--set", "lora.r=-1"],
        {},
        "settings: lora.r: input should be greater than or equal to 1, got -1.",
    ),
    "lora rank via --lora-r": (
        ["--lora-r", "-2"],
        {},
        "settings: lora.r: input should be greater than or equal to 1, got -2.",
    ),
    "lora dropout above 1": (
        ["--set", "lora.lora_dropout=1.5"],
        {},
        "settings: lora.lora_dropout: input should be less than or equal to 1, got 1.5.",
    ),
    "qalora group size zero": (
        ["--set", "lora.qalora_group_size=0"],
        {},
        "settings: lora.qalora_group_size: input should be greater than or equal to 1, got 0.",
    ),
    "hub model while the hub is unreachable": (
        ["--model", "does/notexist"],
        OFFLINE,
        "error: Model 'does/notexist' is neither built in nor a local folder, and the Hugging Face hub cannot be used "
        "to download it (hub.invalid cannot be reached); it is not in the hub cache either: use a built-in model "
        "['smollm2-135m', 'tiny'] (see `pods models`) or a local folder.",
    ),
    "hub model in offline mode": (
        ["--model", "does/notexist"],
        {"HF_HUB_OFFLINE": "1"},
        "the Hugging Face hub cannot be used to download it (offline mode is on (HF_HUB_OFFLINE))",
    ),
}


def run_cli_in_fresh_process(
    args: list[str], environment: dict[str, str], tmp_path: Path
) -> tuple[int, list[str], str]:
    """`pods train ARGS` in a new interpreter: its exit status, the heavy modules it had imported, its output."""
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from pods_rl.cli import app\n"
        f"result = CliRunner().invoke(app, ['train', '--output-dir', {str(tmp_path / 'run')!r}, *{args!r}])\n"
        f"print(json.dumps([result.exit_code, sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)]))\n"
        "print(result.output)\n"
    )
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "WORLD_SIZE")}
    env = {**env, "HF_HOME": str(tmp_path / "hf"), **environment}
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(proxy, None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    first, _, output = done.stdout.partition("\n")
    status, imported = json.loads(first)
    return status, imported, " ".join(output.split())


@pytest.mark.parametrize("case", list(FAST_CASES))
def test_bad_input_fails_in_one_line_before_any_heavy_import(case, tmp_path):
    """The fast path: every bad input is reported, in one line naming the setting, by a process that has imported
    none of torch, transformers, TRL, datasets, reasoning-gym, vLLM or peft (and has loaded no model)."""
    args, environment, message = FAST_CASES[case]
    status, imported, output = run_cli_in_fresh_process(args, environment, tmp_path)
    assert (status, imported) == (2, []), output
    assert output.startswith("error: ") and message in output, output
    assert not (tmp_path / "run").exists()


def test_unreachable_hub_says_how_to_use_local_files(tmp_path):
    """Offline, a hub task fails in one line that names the hub dataset and the data_files setting."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    command = [sys.executable, "-m", "pods_rl", "train", "--task", "gsm8k", "--output-dir", str(tmp_path / "run")]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    output = " ".join(done.stderr.split())
    assert (
        "error: Task 'gsm8k' could not load its data from the Hugging Face hub (Couldn't reach 'openai/gsm8k'" in output
    )
    assert "Offline? Use local files in the same schema: --set task_options.data_files='{train: train.jsonl" in output
    assert not (tmp_path / "run").exists()


def a_previous_run(folder: Path) -> Path:
    """A folder holding a run: its config.yaml and a checkpoint a user would hate to lose."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("model: tiny\ntask: arithmetic\n")
    (folder / "checkpoint-50").mkdir()
    (folder / "checkpoint-50" / "model.safetensors").write_text("weights")
    return folder


def test_output_dir_of_another_run_is_refused(no_model_loading, tmp_path):
    out = a_previous_run(tmp_path / "run")
    result = runner.invoke(app, ["train", "--output-dir", str(out)])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert f"{out} already holds a run: pass --resume {out} to continue it or --overwrite to replace it" in output
    assert (out / "config.yaml").read_text() == "model: tiny\ntask: arithmetic\n"  # untouched


@pytest.mark.parametrize("files", [{"notes.txt": "mine"}, {"config.yaml": "not: [a run"}, {"config.yaml": "x: 1\n"}])
def test_overwrite_refuses_a_folder_that_holds_no_run(no_model_loading, tmp_path, files):
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    result = runner.invoke(app, ["train", "--output-dir", str(out), "--overwrite"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert f"{out} holds files but no run (no config.yaml)" in output
    assert "not replaced even with --overwrite" in output
    assert {p.name: p.read_text() for p in out.iterdir()} == files


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "task_options.digitz=3"],  # found when the task loads
        ["--task", "gsm8k", "--set", "task_options.data_files={train: none.jsonl, test: none.jsonl}"],
        ["-n", "4", "-m", "5"],  # found when PODSConfig is built
    ],
    ids=["task option", "missing data", "m > n"],
)
def test_overwrite_keeps_the_previous_run_when_a_check_fails(no_model_loading, tmp_path, bad):
    out = a_previous_run(tmp_path / "run")
    result = runner.invoke(app, ["train", "--output-dir", str(out), "--overwrite", *bad])
    assert result.exit_code == 2, result.output
    assert (out / "checkpoint-50" / "model.safetensors").read_text() == "weights"


def test_overwrite_keeps_the_previous_run_when_the_model_cannot_load(tmp_path, monkeypatch):
    """The model is the last check before the folder is replaced: a model that cannot load leaves it intact. (The
    hub's probe says it can be used; offline mode then makes the download itself fail.)"""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr(pods_rl.run.folders, "hub_unusable", lambda: None)
    out = a_previous_run(tmp_path / "run")
    result = runner.invoke(app, ["train", "--output-dir", str(out), "--overwrite", "--model", "does/notexist"])
    assert result.exit_code == 2, result.output
    assert "error: Model 'does/notexist' could not be loaded" in " ".join(result.output.split())
    assert (out / "checkpoint-50" / "model.safetensors").read_text() == "weights"


def test_resume_refuses_settings_that_would_make_another_run(no_model_loading, tmp_path):
    out = a_previous_run(tmp_path / "run")
    result = runner.invoke(app, ["train", "--resume", str(out), "--learning-rate", "0.1", "--set", "seed=4"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert (
        "--resume cannot change seed, trainer.learning_rate: a resumed run keeps the settings it started with" in output
    )
    assert "it may change only trainer.max_steps, time_budget, eval.every_steps" in output


def test_resume_checks_the_new_values(no_model_loading, tmp_path):
    out = a_previous_run(tmp_path / "run")
    result = runner.invoke(app, ["train", "--resume", str(out), "--max-steps", "many"])
    assert result.exit_code == 2  # typer's own message: not an integer
    result = runner.invoke(app, ["train", "--resume", str(out), "--set", "time_budget=-5"])
    assert result.exit_code == 2
    assert "time_budget: input should be greater than 0, got -5" in " ".join(result.output.split())


def test_resume_of_a_folder_without_a_run(no_model_loading, tmp_path):
    result = runner.invoke(app, ["train", "--resume", str(tmp_path)])
    assert result.exit_code == 2
    assert "no run there (config.yaml is missing)" in " ".join(result.output.split())


@pytest.mark.parametrize("flag", ["--resume", "--report", "--status"])
def test_a_folder_without_a_comparison_is_named_with_the_flag_that_gave_it(no_model_loading, tmp_path, flag):
    result = runner.invoke(app, ["compare", flag, str(tmp_path)])
    assert result.exit_code == 2
    expected = f"{flag} {tmp_path}: no comparison there (compare.yaml is missing)."
    assert expected in " ".join(result.output.split())


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
    """TRL's convention: None marks a sample a reward function does not apply to; it is not an error, and it is
    left out of that function's mean (counted as 0 it would pull the mean below 0.5)."""

    def partial(completions, **kwargs):
        return [None] + [0.5] * (len(completions) - 1)

    trainer = make_trainer(tmp_path, reward=[partial, vowel_reward], num_generations=4, num_selected=2, max_steps=1)
    trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "rewards/partial/mean" in entry)
    assert logged["rewards/partial/mean"] == 0.5
    assert logged["rewards/partial/std"] == 0.0


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
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: False)
    result = runner.invoke(app, ["train", "--vllm", "--output-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "use_vllm=True needs vLLM" in result.output and "make vllm" in result.output


def test_async_flag_and_its_environment(no_model_loading, monkeypatch, tmp_path):
    """`--async` adds the `asynchronous` section; without vLLM and aiohttp it fails in one line naming them."""
    import importlib.util

    assert _cli_overrides(asynchronous=True) == [{"asynchronous": {}}]
    assert _cli_overrides(asynchronous=False) == []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aiohttp" else real(name, *a))
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: False)
    result = runner.invoke(app, ["train", "--async", "--output-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "asynchronous training needs vllm and aiohttp, which this environment lacks" in output
    assert "make vllm" in output


def test_async_on_a_cpu_needs_lora(no_model_loading, monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "aiohttp" else real(name, *a))
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: True)
    result = runner.invoke(app, ["train", "--async", "--output-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "asynchronous training on a CPU sends the policy to the vLLM server as a LoRA adapter: add --lora-r 8" in (
        " ".join(result.output.split())
    )


def test_resume_of_a_run_without_a_checkpoint(tmp_path):
    """A run that saved no checkpoint (killed before its first, or `save_strategy: no`): `--resume` says so in one
    line, before any heavy import, instead of training from step 0 over its records."""
    out = a_previous_run(tmp_path / "run")
    (out / "checkpoint-50" / "model.safetensors").unlink()
    (out / "checkpoint-50").rmdir()
    (out / "metrics.jsonl").write_text('{"type": "eval", "step": 0, "accuracy": 0.5}\n')
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from pods_rl.cli import app\n"
        f"result = CliRunner().invoke(app, ['train', '--resume', {str(out)!r}])\n"
        f"print(json.dumps([result.exit_code, sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)]))\n"
        "print(result.output)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, _, output = done.stdout.partition("\n")
    assert json.loads(first) == [2, []], output
    assert output.strip().splitlines() == [
        f"error: --resume {out}: the run has no checkpoint to continue from; start the run again with `pods train "
        f"--config {out}/config.yaml --output-dir {out} --overwrite`, which replaces its records."
    ]
    assert (out / "metrics.jsonl").read_text() == '{"type": "eval", "step": 0, "accuracy": 0.5}\n'
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "metrics.jsonl"]  # no lock left behind
