"""Test support: a tiny Llama and character tokenizer built in code, so no test downloads anything."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 +-*=?.")


def two_process_launch() -> list[str]:
    """`accelerate launch` for two CPU processes (torchrun + gloo) on a free port.

    accelerate 1.15 runs `--cpu` jobs in a single process; `--multi_gpu` starts torchrun, which uses gloo on a CPU.
    A fresh port per launch keeps one test's rendezvous from colliding with a previous one still closing.
    """
    accelerate = Path(sys.executable).with_name("accelerate")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
            "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no"]  # fmt: skip


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


def make_trainer(tmp_path, trainer_cls=None, config_cls=None, reward=vowel_reward, **overrides):
    """A PODSTrainer (or another GRPOTrainer class) on the tiny model, saved first so that beta > 0 can load its
    reference copy."""
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
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
    )


def fast_args(**overrides) -> dict:
    """Settings that make a TRL GRPO step take well under a second on a CPU."""
    from pods_rl.trainer.config import CHECKPOINTING_FIELD

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
