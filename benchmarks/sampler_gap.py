"""How far the sampler's log-probabilities of its sampled tokens are from the training forward's, in fp32 and in bf16
(autocast over fp32 weights), with HF `generate`, on this CPU.

With HF `generate`, TRL 1.16 keeps no log-probabilities of the sampler: the update's importance ratio compares the
training forward with itself, so a token that `generate` scored (one token at a time, over its KV cache) differently
from the training forward (the whole sequence at once, through TRL's fused LM head) goes uncorrected. This script
measures that difference per completion token: `--rollouts` samples of each of `--prompts` training prompts of a
preset, drawn as `PODSTrainer` draws them (TRL's generation settings; in bf16 one autocast over the call), each
sampled token's log-prob from the scores it was sampled from, and the same token's log-prob from the training forward
(TRL's `add_fused_lm_head`, the head `_get_per_token_logps_and_entropies` calls) in the same precision.

    .venv/bin/python benchmarks/sampler_gap.py                                  # tiny, 64 prompts x 8 rollouts
    .venv/bin/python benchmarks/sampler_gap.py --model smollm2-135m --prompts 16

Name the CPU with the figures (the first line prints it): bf16 rounds the same way with or without bf16 instructions,
but the kernels (and so the order of sums) differ.
"""

from __future__ import annotations

import argparse
import copy
import warnings

import torch
from rich.table import Table
from transformers import GenerationConfig
from transformers.utils.logging import disable_progress_bar
from trl.trainer.utils import add_fused_lm_head

from pods_rl.console import make_console
from pods_rl.defaults import default_run_settings
from pods_rl.machine import cpu_flags, describe_machine, machine_label
from pods_rl.precision import bf16_instructions
from pods_rl.run.step_costs import render_prompt
from pods_rl.tasks import load_task

PRECISIONS = ("fp32", "bf16")


def sampler_and_trainer_logps(
    model, prompt: list[int], rollouts: int, generation: GenerationConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sampler's and the training forward's log-probs of the completion tokens of `rollouts` samples of `prompt`,
    (rollouts, tokens) each, in the precision of the autocast in effect (none: fp32), and the mask of the tokens that
    count (each completion up to its end token, that one included). `model` carries TRL's fused LM head at
    `generation`'s temperature (`add_fused_lm_head`)."""
    prompts = torch.tensor([prompt] * rollouts)
    generation = copy.deepcopy(generation)
    generation.output_scores = generation.return_dict_in_generate = True
    with torch.no_grad():
        output = model.generate(
            input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=generation
        )
        completions = output.sequences[:, len(prompt) :]
        scores = torch.stack(output.scores, dim=1).float()  # what was sampled from: the logits / temperature
        sampler = scores.log_softmax(-1).gather(-1, completions[..., None]).squeeze(-1)
        ends = torch.isin(completions, torch.tensor(generation.eos_token_id)).long()
        mask = (ends.cumsum(1) - ends) == 0  # up to the first end token, that one included
        attention = torch.cat([torch.ones_like(prompts), mask.long()], dim=1)
        labels = output.sequences.masked_fill(attention == 0, -100)
        labels[:, : len(prompt)] = -100
        trained = model(input_ids=output.sequences, attention_mask=attention, labels=labels, fused_lm_head=True)
        trainer = trained.log_probs[:, -completions.shape[1] :]
    return sampler, trainer, mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    parser.add_argument("--prompts", type=int, default=64, help="training prompts of the model's arithmetic preset")
    parser.add_argument("--rollouts", type=int, default=8, help="samples of each prompt")
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    disable_progress_bar()
    from pods_rl.models import load_model

    console = make_console(stderr=False)
    console.print(
        f"machine: {machine_label(describe_machine())}; bf16 instructions: "
        f"{bf16_instructions(cpu_flags()) or 'none'}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    settings = default_run_settings(options.model, "arithmetic")
    trainer = settings["trainer"]
    task = load_task("arithmetic", **settings["task_options"])
    model, tokenizer = load_model(options.model, dtype=torch.float32)
    model.eval()
    add_fused_lm_head(model, temperature=trainer["temperature"])
    generation = GenerationConfig(  # TRL's HF generation settings at GRPOConfig's defaults
        max_new_tokens=trainer["max_completion_length"], do_sample=True, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=[tokenizer.eos_token_id], temperature=trainer["temperature"],
        top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, disable_compile=True,
    )  # fmt: skip
    prompts = [render_prompt(tokenizer, row) for row in task.train.select(range(options.prompts))["prompt"]]
    table = Table(
        "precision", "tokens", "mean |difference|", "largest |difference|", "mean difference",
        "largest |difference| summed over a completion",
        title=f"{options.model}: sampler minus training forward, log-prob per completion token "
        f"({options.prompts} prompts x {options.rollouts} rollouts, temperature {trainer['temperature']:g})",
    )  # fmt: skip
    for precision in PRECISIONS:
        torch.manual_seed(0)
        differences, sums = [], []
        for prompt in prompts:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                sampler, trained, mask = sampler_and_trainer_logps(model, prompt, options.rollouts, generation)
            differences.append((sampler - trained)[mask])
            sums.append(((sampler - trained) * mask).sum(1))  # a sequence-level importance ratio's log
        difference, summed = torch.cat(differences), torch.cat(sums)
        table.add_row(
            precision, str(difference.numel()), f"{difference.abs().mean():.2e}", f"{difference.abs().max():.2e}",
            f"{difference.mean():+.2e}", f"{summed.abs().max():.2e}",
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
