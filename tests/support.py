"""Test support: a tiny Llama and character tokenizer built in code, so no test downloads anything."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from torch.distributed.tensor import DTensor
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 +-*=?.")


def two_process_launch() -> list[str]:
    return process_launch(2)


def launch_env() -> dict[str, str]:
    """Environment for a launched test script: it imports these test helpers and this checkout's package (not
    whichever pods_rl is installed) first, then the caller's PYTHONPATH; one torch thread per process."""
    tests = Path(__file__).parent
    paths = [str(tests), str(tests.parent / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}


def process_launch(num_processes: int) -> list[str]:
    """`accelerate launch` for `num_processes` CPU processes (torchrun + gloo) on a free port.

    accelerate 1.15 runs `--cpu` jobs in a single process; `--multi_gpu` starts torchrun, which uses gloo on a CPU.
    """
    return [*_accelerate_launch(), "--multi_gpu", "--num_processes", str(num_processes), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no"]  # fmt: skip


def run_launched(launch: list[str], script: Path, *arguments: str, timeout: int = 600) -> None:
    """Run a test script under `launch` (e.g. `two_process_launch()`) with `launch_env()`; a failure shows both ends
    of its stderr (the first error of one process and where the others stopped)."""
    result = subprocess.run(
        [*launch, str(script), *arguments], env=launch_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr[:3000] + "\n...\n" + result.stderr[-3000:]


def config_launch(config_file: Path) -> list[str]:
    """`accelerate launch` with one of the shipped accelerate configs (its processes and engine), on a free port."""
    return [*_accelerate_launch(), "--config_file", str(config_file), "--dynamo_backend", "no"]


def _accelerate_launch() -> list[str]:
    """A fresh port per launch keeps one test's rendezvous from colliding with a previous one still closing."""
    accelerate = Path(sys.executable).with_name("accelerate")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [str(accelerate), "launch", "--main_process_port", str(port)]


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def tiny_llama(tokenizer: PreTrainedTokenizerFast, *, hidden: int = 32, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def prompt_dataset(size: int = 16) -> Dataset:
    """Plain-text prompts of equal length, so prompt padding never differs between runs."""
    return Dataset.from_dict({"prompt": [f"q{i % 10}{(i * 7) % 10}=" for i in range(size)]})


def vowel_reward(completions: list[str], **kwargs) -> list[float]:
    """A non-binary, deterministic reward: the fraction of vowels in the completion."""
    return [sum(c in "aeiou" for c in text) / max(len(text), 1) for text in completions]


def make_trainer(
    tmp_path, trainer_cls=None, config_cls=None, reward=vowel_reward, train_dataset=None, eval_dataset=None, **overrides
):
    """A PODSTrainer (or another GRPOTrainer class) on the tiny model, saved first so that beta > 0 can load its
    reference copy; `prompt_dataset()` unless another train_dataset is given."""
    from pods_rl import PODSConfig, PODSTrainer

    tokenizer = char_tokenizer()
    args = (config_cls or PODSConfig)(**fast_args(output_dir=str(tmp_path), **overrides))
    model_dir = tmp_path / "model"
    tiny_llama(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return (trainer_cls or PODSTrainer)(
        model=str(model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=prompt_dataset() if train_dataset is None else train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
    )


def fast_args(**overrides) -> dict:
    """Settings that make a TRL GRPO step take well under a second on a CPU."""
    from pods_rl.versions import CHECKPOINTING_FIELD

    settings = dict(
        output_dir=overrides.pop("output_dir"),
        bf16=False,
        **{CHECKPOINTING_FIELD: False},
        max_completion_length=8,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        temperature=1.0,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    settings.update(overrides)
    return settings


def tagged_rollouts(tokenizer, prompts: list, tags: list[int]) -> dict:
    """A `rollout_func`'s output: row i gets `scripted_rollout(tags[i])` and its tag as the extra field `row_tag`."""
    completions, logprobs = zip(*(scripted_rollout(tokenizer, tag) for tag in tags), strict=True)
    return {
        "prompt_ids": tokenizer(prompts, add_special_tokens=False)["input_ids"],
        "completion_ids": list(completions),
        "logprobs": list(logprobs),
        "row_tag": tags,
    }


def scripted_rollouts(prompts: list, trainer) -> dict:
    """A `rollout_func` whose rollouts depend only on the global row and the step, never on the number of processes.

    Row `r` of the generation at step `s` gets the tag `1000 * s + r`, returned as an extra field, and the rollout
    `scripted_rollout(tag)`.
    """
    tokenizer = trainer.processing_class
    first_row = trainer.accelerator.process_index * len(prompts)
    tags = [1000 * trainer.state.global_step + first_row + i for i in range(len(prompts))]
    return tagged_rollouts(tokenizer, prompts, tags)


def scripted_rollout(tokenizer, tag: int) -> tuple[list[int], list[float]]:
    """Completion ids (2 to 8 tokens, half of them ended by EOS) and log-probs, drawn from a generator seeded by tag."""
    draw = random.Random(tag)
    ids = [draw.randrange(3, len(tokenizer)) for _ in range(draw.randint(2, 8))]
    if draw.random() < 0.5:
        ids[-1] = tokenizer.eos_token_id
    return ids, [-draw.random() for _ in ids]


def tagged_reward(completions: list[str], row_tag: list[int], log_extra, **kwargs) -> list[float]:
    """Needs `scripted_rollouts`' extra field. Rollouts in the upper half of a pool of 8 get +1 or -1 on top of a
    small vowel and tag term, so max-variance selection with m <= 4 keeps only upper-half rows: when a pool spans two
    processes, the process holding its lower half must receive rows."""
    log_extra("row_tag", list(row_tag))
    rewards = []
    for vowels, tag in zip(vowel_reward(completions), row_tag, strict=True):
        position = tag % 1000 % 8
        spread = 0.0 if position < 4 else (-1.0) ** position
        rewards.append(spread + 0.1 * vowels + 0.01 * (tag % 5))
    return rewards


# Scenarios run on 1, 2 and 4 processes with the same global batch (`per_device_train_batch_size` is per process).
SCENARIOS = {
    # 6 trained rows per process with m = 4: every other pool spans two processes; beta > 0, two iterations.
    "spanning": dict(
        num_generations=8, num_selected=4, per_device_train_batch_size=6, beta=0.04, num_iterations=2, max_steps=4
    ),
    # 4 trained rows per process with m = 2: two whole pools per process, nothing moves; the random rule. A checkpoint
    # every step, to resume from.
    "local": dict(
        num_generations=8,
        num_selected=2,
        per_device_train_batch_size=4,
        selection_rule="random",
        loss_type="dapo",
        max_steps=2,
        save_strategy="steps",
        save_steps=1,
    ),
}


def run_scenario(name: str, out: Path, num_processes: int, world_size: int, resume_from: Path | None = None) -> dict:
    """Train scenario `name` with `scripted_rollouts` (from checkpoint `resume_from` if given); the per-process batch
    is scaled so that the global batch is that of `world_size` processes. Returns what each process trained on and
    the end state."""
    from accelerate import PartialState

    from pods_rl import PODSConfig, PODSTrainer

    settings = dict(SCENARIOS[name], loss_type=SCENARIOS[name].get("loss_type", "grpo"))
    settings["per_device_train_batch_size"] *= world_size // num_processes
    args = PODSConfig(**fast_args(output_dir=str(out / "run"), **settings))  # joins the process group
    tokenizer = char_tokenizer()
    model_dir = out / "model"  # saved, so that beta > 0 can load the reference model
    state = PartialState()
    if state.is_main_process:
        tiny_llama(tokenizer).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    state.wait_for_everyone()
    trainer = PODSTrainer(
        model=str(model_dir),
        reward_funcs=tagged_reward,
        args=args,
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
        rollout_func=scripted_rollouts,
    )
    generations = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        masks = output["completion_mask"].bool()

        def unpadded(key: str) -> list[list]:
            return [row[mask].tolist() for row, mask in zip(output[key], masks, strict=True)]

        generations.append(
            {
                "tags": [row["row_tag"] for row in inputs],  # TRL merged the moved extra field into the inputs
                "completion_ids": unpadded("completion_ids"),
                "logprobs": unpadded("sampling_per_token_logps"),
                "advantages": output["advantages"].tolist(),
            }
        )
        return output

    trainer._generate_and_score_completions = spy
    trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    return {
        "generations": generations,
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "rows_moved": [e["pods/rows_moved"] for e in trainer.state.log_history if "pods/rows_moved" in e],
        "table_tags": list(trainer._logs["extra"]["row_tag"]),
        "table_advantages": list(trainer._logs["advantages"]),
        "params": _full_params(trainer),
        "wrapper": type(trainer.model_wrapped).__name__,
        # FSDP2 holds DTensor shards, ZeRO-3 a partition of each parameter (an empty tensor plus `ds_tensor`).
        "sharded": any(isinstance(p, DTensor) or hasattr(p, "ds_tensor") for p in trainer.model.parameters()),
    }


def _full_params(trainer) -> dict[str, list]:
    """Every parameter whole, gathered from its shards under FSDP2 or ZeRO-3 (collectives: every process calls)."""
    gathered = contextlib.nullcontext()
    if any(hasattr(p, "ds_tensor") for p in trainer.model.parameters()):
        import deepspeed

        gathered = deepspeed.zero.GatheredParameters(list(trainer.model.parameters()))
    with gathered:
        return {k: _full_tensor(v).tolist() for k, v in trainer.model.state_dict().items()}


def _full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor, gathered from every process if it is a DTensor shard (a collective: every process calls)."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def flagged_dataset(flags: str) -> Dataset:
    """Prompt i is `v<i>=` where flags[i] is "1" (its rollouts' rewards vary) and `c<i>=` where it is "0" (equal)."""
    return Dataset.from_dict({"prompt": [("v" if flag == "1" else "c") + f"{i:02d}=" for i, flag in enumerate(flags)]})


def flag_rollouts(prompts: list, trainer) -> dict:
    """A `rollout_func` whose rollouts depend only on the prompt and the position in its pool: row i of prompt
    `v<k>=` or `c<k>=` gets the tag `100 * k + i % n` and the rollout `scripted_rollout(tag)`. Round, step, process
    and resume do not change them."""
    tokenizer, n = trainer.processing_class, trainer.args.num_generations
    tags = [100 * int(prompt[1:3]) + i % n for i, prompt in enumerate(prompts)]
    return tagged_rollouts(tokenizer, prompts, tags)


def flag_reward(prompts: list[str], completions: list[str], row_tag: list[int], log_extra, **kwargs) -> list[float]:
    """Needs `flag_rollouts`: a `v` prompt's rollouts get their position in the pool (0, 1, 2, ...), a `c` prompt's
    all 1. Logs the tags to the completions table."""
    log_extra("row_tag", list(row_tag))
    return [float(tag % 100) if prompt[0] == "v" else 1.0 for prompt, tag in zip(prompts, row_tag, strict=True)]


def flag_trainer(out: Path, flags: str, settings: dict, rollout_func):
    """A PODSTrainer on the tiny Llama over `flagged_dataset(flags)`, rewarded by `flag_reward`, with `settings`
    (PODSConfig fields on top of `fast_args`) and `rollout_func`."""
    from pods_rl import PODSConfig, PODSTrainer

    tokenizer = char_tokenizer()
    return PODSTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=flag_reward,
        args=PODSConfig(**fast_args(output_dir=str(out), **settings)),
        train_dataset=flagged_dataset(flags),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )


def run_dynamic_sampling(out: Path, flags: str, resume_from: Path | None = None, **overrides) -> dict:
    """Train on `flagged_dataset(flags)` in order, with dynamic sampling over pools of 4, `flag_rollouts` and
    `flag_reward`. Returns what this process trained at each generation (prompts, tags, completion ids,
    advantages), the losses, the dynamic-sampling metrics and the completions table's tags."""

    settings = dict(num_generations=4, shuffle_dataset=False, dynamic_sampling=True, max_steps=4, **overrides)
    trainer = flag_trainer(out, flags, settings, flag_rollouts)
    generations = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        masks = output["completion_mask"].bool()
        generations.append(
            {
                "prompts": [row["prompt"] for row in inputs],
                "tags": [row["row_tag"] for row in inputs],  # TRL merged the extra field into the inputs
                "completion_ids": [
                    row[mask].tolist() for row, mask in zip(output["completion_ids"], masks, strict=True)
                ],
                "advantages": output["advantages"].tolist(),
            }
        )
        return output

    trainer._generate_and_score_completions = spy
    trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    names = ("loss", "pods/generation_rounds", "pods/prompts_generated", "pods/rollouts_generated")
    return {
        "generations": generations,
        **{name: [entry[name] for entry in trainer.state.log_history if name in entry] for name in names},
        "table_tags": list(trainer._logs["extra"]["row_tag"]),
    }


WALL_TIMES = {"train_seconds", "step_time", "eval_seconds"}  # and every `pods/time_*`: they differ run to run


def without_wall_times(record: dict) -> dict:
    """A metrics.jsonl record without its wall-clock fields, for comparing two runs that should be equal."""
    return {k: v for k, v in record.items() if k not in WALL_TIMES and not k.startswith("pods/time_")}


def flag_vowel_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """For `flagged_dataset` prompts with generated completions: a `v` prompt's rollouts get their vowel fraction (they
    vary, almost surely), a `c` prompt's all 1 (dynamic sampling drops the group)."""
    vowels = vowel_reward(completions)
    return [v if prompt[0] == "v" else 1.0 for prompt, v in zip(prompts, vowels, strict=True)]


def failing_once(step: int, call: int, process: int = 0):
    """`flag_vowel_reward`, except that it raises once: in its `call`-th call of step `step + 1` on `process`."""
    calls = []

    def flaky_reward(prompts: list[str], completions: list[str], trainer_state, **kwargs) -> list[float]:
        from accelerate import PartialState

        if trainer_state.global_step == step and PartialState().process_index == process:
            calls.append(1)
            if len(calls) == call:
                raise ZeroDivisionError("a transient failure")
        return flag_vowel_reward(prompts, completions)

    return flaky_reward


# On 2 processes (tests/trainer/resume_two_process_run.py): flags, settings, the checkpoint the first resume starts
# from, the resumed run's checkpoint the second starts from, and (step, call) of the reward failure on process 1.
TWO_PROCESS_RESUMES = {
    "plain": ("11011101", dict(max_steps=6), 3, 5, (4, 1)),
    "two-iterations-dynamic-sampling": (
        "11111101",
        dict(max_steps=8, num_iterations=2, dynamic_sampling=True),
        5,
        7,
        (4, 2),
    ),
    "screen": ("11011101", dict(max_steps=6, rollout_allocation="screen", screen_size=2), 3, 5, (4, 1)),
    "history": ("11011101", dict(max_steps=6, rollout_allocation="history", max_rollouts_per_prompt=6), 3, 5, (4, 1)),
}


def run_resumable(
    out: Path,
    flags: str,
    resume_from: Path | None = None,
    reward=flag_vowel_reward,
    iterable: bool = False,
    **overrides,
) -> dict:
    """Train on `flagged_dataset(flags)` (as an IterableDataset if `iterable`), shuffled every epoch, with generated
    rollouts and `reward`, saving a
    checkpoint every step (from checkpoint `resume_from` if given). Returns this process's trained prompts per
    generation, the logged losses, epochs and generation rounds, and the final parameters; or, when a reward
    function fails, the error, after `save_checkpoint_of_failed_step`."""
    from pods_rl import PODSConfig, PODSTrainer
    from pods_rl.trainer.trainer import RewardError

    settings = dict(num_generations=4, num_selected=2, save_strategy="steps", save_steps=1, max_steps=9, seed=3)
    settings.update(loss_type="dapo", disable_tqdm=True, **overrides)
    tokenizer = char_tokenizer()
    trainer = PODSTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=reward,
        args=PODSConfig(**fast_args(output_dir=str(out), **settings)),
        train_dataset=flagged_dataset(flags).to_iterable_dataset() if iterable else flagged_dataset(flags),
        processing_class=tokenizer,
    )
    prompts = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        prompts.append([row["prompt"] for row in inputs])
        return output

    trainer._generate_and_score_completions = spy
    try:
        trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    except RewardError as error:
        trainer.save_checkpoint_of_failed_step()
        return {"failure": str(error), "step": trainer.state.global_step}
    history = [entry for entry in trainer.state.log_history if "loss" in entry]
    return {
        "prompts": prompts,
        "losses": [entry["loss"] for entry in history],
        "epochs": [entry["epoch"] for entry in history],
        "rounds": [entry.get("pods/generation_rounds", 1.0) for entry in history],
        "params": {k: _full_tensor(v).tolist() for k, v in trainer.model.state_dict().items()},
    }


def position_rollouts(prompts: list, trainer) -> dict:
    """A `rollout_func` for rollout allocation on `flagged_dataset` prompts: each row's tag is `100 * k + i`, where i
    is the row's position among the consecutive rows of its prompt in this call (a screen's 0..k-1, an extension's
    0..n-k-1, a history pool's 0..size-1), and its rollout `scripted_rollout(tag)`; with `flag_reward`, a `v` prompt's
    rows of one call vary, a `c` prompt's are all 1."""
    tokenizer, tags = trainer.processing_class, []
    for i, prompt in enumerate(prompts):
        tags.append(tags[-1] + 1 if i and prompts[i - 1] == prompt else 100 * int(prompt[1:3]))
    return tagged_rollouts(tokenizer, prompts, tags)


def run_allocation(out: Path, flags: str, **overrides) -> dict:
    """Train on `flagged_dataset(flags)` in order with rollout allocation, pools of n = 4, m = 2, `position_rollouts`
    and `flag_reward`. Returns what this process trained at each generation (prompts, tags, advantages), the logged
    allocation metrics and the histogram lines."""

    settings = {**dict(num_generations=4, num_selected=2, shuffle_dataset=False, max_steps=4), **overrides}
    trainer = flag_trainer(out, flags, settings, position_rollouts)
    generations = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        generations.append(
            {
                "prompts": [row["prompt"] for row in inputs],
                "tags": [row["row_tag"] for row in inputs],
                "advantages": output["advantages"].tolist(),
            }
        )
        return output

    trainer._generate_and_score_completions = spy
    trainer.train()
    names = [
        "pods/rollouts_generated",
        "pods/rollouts_trained",
        "pods/allocation_rounds",
        "pods/prompts_extended",
        "pods/prompts_skipped",
        "pods/prompts_filled",
        "pods/rollouts_per_prompt_max",
    ]
    histogram = out / "rollouts_per_prompt.jsonl"
    return {
        "generations": generations,
        **{name: [entry[name] for entry in trainer.state.log_history if name in entry] for name in names},
        "histogram": [json.loads(line) for line in histogram.read_text().splitlines()] if histogram.exists() else [],
    }
