"""`tiny`: a small Llama built in code, warm-started on arithmetic so RL has something to improve.

The tokenizer is a byte-level BPE trained here (digits kept one per token, the answer tags and chat
roles as single tokens). The warm start is a short supervised fine-tune on arithmetic demonstrations of
which a fraction is deliberately flawed (the work done, but the first step's value answered), so the
model starts partly right, as an instruct model does, with a mistake that RL can find and fix.
The result is cached under a folder named by a hash of the recipe: a changed recipe rebuilds it. A comparison pins
the checkpoint its first run used (`PINNED_ENV`), so that its later runs start from it on any CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch, tokenizers and transformers load when a model is built: `pods` checks settings first
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

logger = logging.getLogger(__name__)
Progress = Callable[[int, int], None]  # (done, total), called as a long build goes on

# Bumped whenever the code below changes what a recipe builds, so old caches are not reused.
BUILD_VERSION = 2

ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
EOS_TOKEN = "<|end|>"
PAD_TOKEN = "<|pad|>"
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]

# The paper's format in few tokens: a tiny model pays for every prompt token on every rollout.
TINY_SYSTEM_PROMPT = "Think in <think>\n...\n</think>, then answer in <answer>\n...\n</answer>."

# The arithmetic task the warm start is fitted on, and that the default RL run trains on: sums of three one-digit
# numbers, two steps each (1000 distinct: 800 to train, 200 held out from both the warm start and RL).
TINY_TASK_OPTIONS = {
    "operands": [3],
    "digits": 1,
    "operators": "+",
    "num_train": 800,
    "num_test": 200,
    "system_prompt": TINY_SYSTEM_PROMPT,
}

# Each turn is its role token then its text; assistant turns end with EOS. Compact on purpose:
# every prompt token costs a tiny model compute on every rollout.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines the built checkpoint; its hash names the cache folder."""

    # Model: a 2-layer Llama with tied embeddings.
    hidden_size: int = 64
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    vocab_size: int = 384
    seed: int = 0
    # Warm start: SFT on demonstrations of the arithmetic train split.
    task_options: dict = field(default_factory=lambda: dict(TINY_TASK_OPTIONS))
    flawed_fraction: float = 0.6
    sft_steps: int = 600
    sft_batch_size: int = 32
    sft_learning_rate: float = 3e-3

    def key(self) -> str:
        """Short stable hash of the recipe and the build code version."""
        payload = json.dumps({"build": BUILD_VERSION, **dataclasses.asdict(self)}, sort_keys=True, default=list)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


# vLLM's CPU attention needs head_dim >= 32, and the default has 4 heads of 16 (its documented run was measured so):
# runs that generate with vLLM build this variant, 2 heads of 32, otherwise the same recipe.
VLLM_RECIPE = dataclasses.replace(TinyRecipe(), num_heads=2)

# What `model_options` may change in the tiny model's warm start, with the type and range of each (the run settings
# check them): the share of flawed demonstrations sets how often the warm-started model answers right (its base pass
# rate), `sft_steps` how long it is fitted, `seed` its initialisation and which demonstrations are flawed.
WARM_START_OPTIONS: dict[str, tuple[type, float, float]] = {
    "flawed_fraction": (float, 0.0, 1.0),
    "sft_steps": (int, 0, 100_000),
    "seed": (int, 0, 2**32 - 1),
}


def tiny_recipe(options: dict | None = None, *, vllm: bool = False) -> TinyRecipe:
    """The recipe `tiny` is built from: the default (or the vLLM shape) with `options` (`model_options`) applied."""
    unknown = sorted(set(options or {}) - set(WARM_START_OPTIONS))
    if unknown:
        raise ValueError(f"model_options {unknown}: the tiny model takes {list(WARM_START_OPTIONS)}")
    return dataclasses.replace(VLLM_RECIPE if vllm else TinyRecipe(), **(options or {}))


def cache_root() -> Path:
    """Where built models live: $PODS_RL_CACHE, else ~/.cache/pods-rl."""
    return Path(os.environ.get("PODS_RL_CACHE", Path.home() / ".cache" / "pods-rl"))


# A folder of pinned warm starts (`pods compare` sets it to its folder's `base-models/` for its runs): a checkpoint
# there is used instead of the cache's, and one built (or found in the cache) while it is set is copied there first.
# The warm start differs between CPU instruction sets (docs/benchmarks/presets.md), so a comparison that resumes on
# another kind of CPU would otherwise train its later seeds from another base model.
PINNED_ENV = "PODS_RL_PINNED_MODELS"


@contextlib.contextmanager
def written_in_place(final: Path) -> Iterator[Path]:
    """A temporary sibling of the checkpoint folder `final` to write into, renamed to `final` when the block ends,
    so that an interrupted or concurrent build never leaves a half-written checkpoint where a later load would find
    it (a process that finished first keeps its own); the temporary folder is removed in any case."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        yield tmp
        try:
            tmp.rename(final)
        except OSError:  # another process finished the same checkpoint first: keep theirs
            if not (final / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on the prompt text; byte-level so that any string round-trips."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from pods_rl.tasks.base import SYSTEM_PROMPT

    corpus = [
        SYSTEM_PROMPT,
        TINY_SYSTEM_PROMPT,
        "Compute 12+3*4-5.",
        "<think>\n1+2=3\n3*4=12\n</think>\n<answer>\n-9\n</answer>",
    ]
    tok = Tokenizer(models.BPE())
    # Digits are split one per token so that numbers are spelled out, which a tiny model learns faster.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus * 4, trainer=trainer)
    tok.add_tokens(TAG_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=ROLE_TOKENS,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=512,
    )


def build_model(recipe: TinyRecipe, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A freshly initialised Llama sized by the recipe (seeded, so builds are reproducible)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(recipe.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def warm_start(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    recipe: TinyRecipe,
    out: Path,
    progress: Progress | None = None,
) -> None:
    """Supervised fine-tuning on (partly flawed) arithmetic demonstrations, loss on completions only.

    Its losses go to the `pods_rl` logger (the run's log file), its steps to `progress`; nothing is printed.
    """
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from pods_rl.tasks.arithmetic import load_arithmetic, sft_dataset
    from pods_rl.versions import CHECKPOINTING_FIELD

    task = load_arithmetic(seed=recipe.seed, **recipe.task_options)
    train = sft_dataset(task.train, flawed_fraction=recipe.flawed_fraction, seed=recipe.seed)
    with _accelerate_state_kept():  # TrainingArguments reset accelerate's state when created
        args = SFTConfig(
            output_dir=str(out / "sft"),
            max_steps=recipe.sft_steps,
            per_device_train_batch_size=recipe.sft_batch_size,
            learning_rate=recipe.sft_learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=min(20, recipe.sft_steps // 10),
            weight_decay=0.0,
            seed=recipe.seed,
            bf16=False,
            **{CHECKPOINTING_FIELD: False},
            use_cpu=True,
            save_strategy="no",
            report_to=[],
            logging_steps=max(1, recipe.sft_steps // 10),
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(_reporting_callback(progress))
        trainer.train()
    shutil.rmtree(out / "sft", ignore_errors=True)


@contextlib.contextmanager
def _accelerate_state_kept() -> Iterator[None]:
    """Put accelerate's process-wide state back as it was after the block.

    The warm start trains on CPU in full precision, also on a GPU machine, so that a GPU does not change it (it
    still differs between CPU instruction sets: docs/benchmarks/presets.md). Its
    TrainingArguments reset accelerate's state and its Accelerator sets it (CPU, no mixed precision); a run's trainer
    created afterwards on a GPU (bf16) would then fail with "AcceleratorState has already been initialized", or find
    itself on CPU. accelerate's states are shared dicts that their instances alias, so restoring the dicts' contents
    restores every instance (the run's TrainingArguments keep theirs).
    """
    from accelerate.state import AcceleratorState, GradientState, PartialState

    states = (PartialState._shared_state, AcceleratorState._shared_state, GradientState._shared_state)
    saved = [dict(state) for state in states]
    try:
        yield
    finally:
        for state, contents in zip(states, saved, strict=True):
            state.clear()
            state.update(contents)


def _reporting_callback(progress: Progress | None):
    """A TrainerCallback sending the warm start's steps to `progress` and its losses to the log."""
    from transformers import TrainerCallback

    class ReportingCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if progress is not None:
                progress(state.global_step, state.max_steps)

        def on_log(self, args, state, control, logs=None, **kwargs):
            logger.info("warm start step %d/%d: %s", state.global_step, state.max_steps, logs)

    return ReportingCallback()


def build_tiny(
    recipe: TinyRecipe | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> Path:
    """Return the folder of the warm-started checkpoint for `recipe`, building it first if needed.

    `progress` receives the warm start's (step, total steps) when a build runs.

    The build writes into a temporary sibling folder and renames it into place (`written_in_place`). With
    `$PODS_RL_PINNED_MODELS` set, the pinned checkpoint comes first (`PINNED_ENV`).
    """
    recipe = recipe or TinyRecipe()
    name = f"tiny-{recipe.key()}"
    pinned = os.environ.get(PINNED_ENV)
    if pinned and (Path(pinned) / name / "config.json").exists():
        return Path(pinned) / name
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    final = root / name
    if not (final / "config.json").exists():
        with written_in_place(final) as tmp:
            tokenizer = build_tokenizer(recipe.vocab_size)
            model = build_model(recipe, tokenizer)
            if recipe.sft_steps > 0:
                warm_start(model, tokenizer, recipe, tmp, progress)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "recipe.json").write_text(json.dumps(dataclasses.asdict(recipe), indent=2, default=list))
    if not pinned:
        return final
    with written_in_place(Path(pinned) / name) as tmp:  # pinned on first use: the cache's build, copied
        shutil.copytree(final, tmp, dirs_exist_ok=True)
    return Path(pinned) / name
