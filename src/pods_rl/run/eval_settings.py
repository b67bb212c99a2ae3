"""What `pods eval` scores: which weights, on which task variant, with which evaluation settings.

A run folder (`runs/DIR`), its `final/` or one of its `checkpoint-N/` folders is scored as the run scored itself:
on its task and task options, with its evaluation settings, all from its config.yaml (`eval.num_examples`;
`eval.max_new_tokens`, else the trainer's `max_completion_length`; `eval.batch_size`; `eval.sampled_k` at the
trainer's temperature; the seed). Any other model is scored with the settings `pods train` starts from for it on
that task (`default_run_settings`: `pods eval --model tiny` scores the tiny preset's sums of three digits, as the
default run does). `pods eval`'s options and `--set` override either, key by key. A `--task` other than the run's
starts from that task's defaults for the run's model: a run's task options belong to its own task.

Nothing here imports torch, TRL or datasets until `load_weights`: `resolve_eval` checks the input first, so that a
wrong option fails in one line in about a second.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pods_rl.defaults import default_run_settings
from pods_rl.run.folders import CONFIG_FILE, check_model_name
from pods_rl.run.settings import RunSettings, SettingsError, flatten, merge, parse_override, read_yaml

# The settings an evaluation reads, besides task_options.KEY: what `pods eval --set` accepts.
EVAL_KEYS = (
    "task",
    "seed",
    "eval.num_examples",
    "eval.max_new_tokens",
    "eval.batch_size",
    "eval.sampled_k",
    "trainer.temperature",
)
# Where each option of `pods eval` goes in the run settings.
OPTION_KEYS = {
    "task": ("task",),
    "num_examples": ("eval", "num_examples"),
    "max_new_tokens": ("eval", "max_new_tokens"),
    "batch_size": ("eval", "batch_size"),
    "sampled_k": ("eval", "sampled_k"),
    "temperature": ("trainer", "temperature"),
}
# TRL's defaults of the two trainer settings an evaluation reads, for settings without them (`pods train` writes
# both into every run's config.yaml; a test keeps these equal to PODSConfig's).
TRAINER_DEFAULTS = {"max_completion_length": 512, "temperature": 1.0}
CHECKPOINT = re.compile(r"checkpoint-(\d+)")


@dataclass(frozen=True)
class EvalPlan:
    """The weights to load, and the settings (a run's, or `pods train`'s defaults, with the user's over them)."""

    weights: str  # a model name, folder or hub id; or a run's final/ or checkpoint-N/
    settings: RunSettings
    run_dir: Path | None = None  # the run whose settings these start from

    @property
    def adapter(self) -> bool:
        """Whether the weights are a LoRA adapter over the run's model (a LoRA run's final/ and checkpoints)."""
        return self.run_dir is not None and (Path(self.weights) / "adapter_config.json").is_file()

    @property
    def max_new_tokens(self) -> int:
        completion_length = self.settings.trainer.get(
            "max_completion_length", TRAINER_DEFAULTS["max_completion_length"]
        )
        return self.settings.eval.max_new_tokens or completion_length

    @property
    def temperature(self) -> float:
        return self.settings.trainer.get("temperature", TRAINER_DEFAULTS["temperature"])

    def examples(self, test):
        """The first `eval.num_examples` rows of the task's test split (all of them when unset), as a run takes."""
        count = self.settings.eval.num_examples
        return test if count is None else test.select(range(min(count, len(test))))

    def describe(self, num_examples: int) -> str:
        """The task variant and decoding scored, on one line."""
        settings = self.settings
        options = ", ".join(f"{key}={json.dumps(value)}" for key, value in settings.task_options.items())
        k = settings.eval.sampled_k
        sampled = f", sampled pass@1 over {k} samples at temperature {self.temperature:g} (seed {settings.seed})"
        source = (
            f"the run's settings, {self.run_dir / CONFIG_FILE}"
            if self.run_dir is not None
            else f"the defaults of `pods train` for {settings.model} on {settings.task}"
        )
        return (
            f"eval: {self.weights} on {settings.task} ({options or 'its default options'}): {num_examples} held-out "
            f"examples, greedy pass@1{sampled if k else ''}, up to {self.max_new_tokens} new tokens, in batches of "
            f"{settings.eval.batch_size} ({source})"
        )


def eval_overrides(*, set: list[str] | None = None, **options: Any) -> list[dict[str, Any]]:
    """`pods eval`'s options (those given: not None) and its `--set KEY=VALUE` texts as nested overrides.

    Refuses, in one line, a `--set` key that no evaluation reads (the trainer's, LoRA's, the schedule's).
    """
    overrides = []
    for name, value in options.items():
        if value is not None:
            for key in reversed(OPTION_KEYS[name]):
                value = {key: value}
            overrides.append(value)
    for text in set or []:
        override = parse_override(text)
        for key in flatten(override) or override:  # an empty mapping (task_options={}) is checked by its own key
            if key not in EVAL_KEYS and key != "task_options" and not key.startswith("task_options."):
                raise SettingsError(
                    f"pods eval --set {key}: not a setting of an evaluation; --set takes task_options.KEY, "
                    f"{', '.join(EVAL_KEYS)}."
                )
        overrides.append(override)
    return overrides


def resolve_eval(model: str, overrides: list[dict[str, Any]]) -> EvalPlan:
    """What `pods eval --model MODEL` with these overrides scores; raises SettingsError (one line) on bad input.

    The user's overrides are checked on their own first, then the run folder or the model name, and only then are
    the defaults built (those of a model off the presets ask torch whether there is a GPU).
    """
    user: dict[str, Any] = {}
    for override in overrides:
        user = merge(user, override)
    RunSettings.from_dict(user, where="pods eval", checks="fields")
    task = user.get("task")
    run_dir, weights = weights_of(Path(model))
    if run_dir is None:
        check_model_name(model)
        base = default_run_settings(model, task or "arithmetic")
    else:
        path = run_dir / CONFIG_FILE
        saved = RunSettings.from_dict(read_yaml(path), where=str(path), checks="portable")
        base = saved.to_dict() if task in (None, saved.task) else default_run_settings(saved.model, task)
    plan = EvalPlan(weights, RunSettings.from_dict(merge(base, user), where="pods eval", checks="portable"), run_dir)
    if plan.adapter:
        check_model_name(plan.settings.model)  # the adapter goes over the run's model
    return plan


def weights_of(path: Path) -> tuple[Path | None, str]:
    """The run folder behind `path` (None when it is not a run's) and the weights to load: a run folder's final/, or
    `path` itself when it is a run's final/ or checkpoint-N/ (or not a run's at all)."""
    if (path / CONFIG_FILE).is_file():
        if not (path / "final").is_dir():
            steps = [(int(m[1]), p) for p in path.iterdir() if (m := CHECKPOINT.fullmatch(p.name)) and p.is_dir()]
            hint = f": give one of its checkpoints, e.g. --model {max(steps)[1]}" if steps else ", nor a checkpoint"
            raise SettingsError(f"{path} holds a run that has no final/ (it has not finished){hint}")
        return path, str(path / "final")
    if (path.name == "final" or CHECKPOINT.fullmatch(path.name)) and (path.parent / CONFIG_FILE).is_file():
        return path.parent, str(path)
    return None, str(path)


def load_weights(plan: EvalPlan, display):
    """The model and tokenizer to score, loaded as `pods train` loads a model (fp32 on a CPU).

    A LoRA run's final/ and checkpoints hold an adapter: it goes over the run's own model, found or built as the run
    found it, rather than over the folder the adapter recorded (a built-in model's cache folder, which a cleared cache
    or another machine lacks). Anything else loads as a model (an adapter folder outside a run over its recorded
    base, by transformers).
    """
    from pods_rl.run.train import load_run_model

    if not plan.adapter:
        return load_run_model(plan.weights, display)
    from peft import PeftModel

    vllm = bool(plan.settings.trainer.get("use_vllm"))  # the tiny model a vLLM run trained is built in another shape
    base, tokenizer = load_run_model(plan.settings.model, display, vllm=vllm, options=plan.settings.model_options)
    return PeftModel.from_pretrained(base, plan.weights), tokenizer
