"""Would skipping by history help on your model and task? How well a prompt's earlier groups predict that its next
group of k rollouts is all-equal (all solved or all failed: nothing to learn), which `rollout_allocation: history`
relies on (docs/allocation.md).

From a finished `pods train` run (its config.yaml; the model in its `final/` folder, or `--model`): every training
prompt (or the first `--limit`) gets `--passes` groups of k rollouts, generated as the run trained (HF `generate`,
its temperature and completion length) and scored by the task's weighted rewards; a success is a score >= the run's
`success_threshold`, as the history counts it. The history of passes 1 .. P-1 (`PassRateHistory`, its Beta(1, 1)
prior, no decay) predicts for each prompt the probability that its last group is all-equal in successes; the last
pass says whether it was. Printed: the share of all-equal groups, the prediction's mean (calibration) and AUC, the
share of prompts whose pass rate is below 0.1 or above 0.9, and the all-equal share among the prompts kept when the
ones predicted most likely all-equal are skipped (25% and 50% of them). An AUC near 0.5 and a kept share near the
whole share mean skipping would cost generation's candidates without changing what is trained.

    .venv/bin/python benchmarks/history_predictability.py runs/compare-allocation-tiny/grpo/seed-0
    .venv/bin/python benchmarks/history_predictability.py runs/my-run --passes 4 --limit 128

The history a training run keeps is fresher for some prompts and staler for others (it learns while the policy
changes); this measures the best case, a policy that does not change between passes. Minutes on a CPU for the
tiny model (4 passes x 256 prompts x 4 rollouts: about 20 s on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SKIPPED_SHARES = (0.25, 0.5)


def predictability(earlier: list[torch.Tensor], last: torch.Tensor, threshold: float | None) -> dict[str, float]:
    """From (G, k) scores of each earlier pass and of the last one: how well the history of the earlier passes
    predicts the last pass's all-equal groups (see the module's text for each field)."""
    import torch

    from pods_rl.core.allocation import PassRateHistory, count_outcomes

    ids = [str(index) for index in range(last.shape[0])]
    history = PassRateHistory(success_threshold=threshold)
    for scores in earlier:
        history.observe(ids, scores)
    k = last.shape[1]
    predicted = history.zero_variance_probability(ids, k)
    successes, failures = count_outcomes(last, threshold)
    all_equal = ((successes == 0) | (failures == 0)).double()
    rate = history.pass_rate(ids)
    result = {
        "prompts": float(len(ids)),
        "k": float(k),
        "all_equal": all_equal.mean().item(),
        "predicted": predicted.mean().item(),
        "auc": auc(predicted, all_equal.bool()),
        "extreme_rates": ((rate < 0.1) | (rate > 0.9)).double().mean().item(),
    }
    order = torch.argsort(predicted, descending=True, stable=True)
    for share in SKIPPED_SHARES:
        kept = order[round(share * len(order)) :]
        result[f"kept_all_equal_{share}"] = all_equal[kept].mean().item()
    return result


def auc(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """The probability that a random positive scores above a random negative (ties count half): Mann-Whitney's U
    over (positives x negatives); NaN when either class is empty."""
    from scipy import stats

    if positive.all() or not positive.any():
        return float("nan")
    u = stats.mannwhitneyu(scores[positive].numpy(), scores[~positive].numpy(), alternative="two-sided").statistic
    return float(u) / (int(positive.sum()) * int((~positive).sum()))


def generate_passes(run: Path, model_dir: str, passes: int, k: int | None, limit: int | None, seed: int):
    """(scores of each pass: a list of (G, k) tensors, the success threshold, k) for the run's training prompts."""
    import torch
    import yaml

    from pods_rl.models import load_model
    from pods_rl.tasks.registry import load_task

    config = yaml.safe_load((run / "config.yaml").read_text())
    trainer = config.get("trainer") or {}
    k = k or int(trainer.get("num_generations", 4))
    threshold = trainer.get("success_threshold", 0.5)
    task = load_task(config["task"], **(config.get("task_options") or {}))
    prompts = task.train.select(range(min(limit, len(task.train)))) if limit else task.train
    model, tokenizer = load_model(model_dir)
    model.eval()
    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts["prompt"]]
    columns = {name: prompts[name] for name in prompts.column_names if name != "prompt"}
    weights = torch.tensor(task.reward_weights, dtype=torch.float64)
    torch.manual_seed(seed)
    result = []
    for _ in range(passes):
        groups = []
        for start in range(0, len(texts), 32):
            batch = [text for text in texts[start : start + 32] for _ in range(k)]
            encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(
                    **encoded,
                    do_sample=True,
                    temperature=float(trainer.get("temperature", 1.0)),
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=int(trainer.get("max_completion_length", 256)),
                    pad_token_id=tokenizer.pad_token_id,
                )
            completions = tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            completions = [[{"role": "assistant", "content": text}] for text in completions]
            rows = {name: [v for v in values[start : start + 32] for _ in range(k)] for name, values in columns.items()}
            rewards = torch.tensor(
                [[float(r) for r in f(completions, **rows)] for f in task.reward_funcs], dtype=torch.float64
            )
            groups.append((weights @ rewards).view(-1, k))
        result.append(torch.cat(groups))
    return result, threshold, k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished `pods train` run folder (config.yaml, final/)")
    parser.add_argument("--model", help="a model folder instead of the run's final/")
    parser.add_argument("--passes", type=int, default=4, help="groups per prompt; the last one is predicted (>= 2)")
    parser.add_argument("--k", type=int, help="rollouts per group (default: the run's num_generations)")
    parser.add_argument("--limit", type=int, help="only the first N training prompts")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    if options.passes < 2:
        sys.exit("--passes must be at least 2: the history needs one pass and the prediction another")
    if not (options.run / "config.yaml").exists():
        sys.exit(f"{options.run}: no config.yaml (not a `pods train` run folder)")
    model_dir = options.model or str(options.run / "final")
    if not Path(model_dir).exists():
        sys.exit(f"{model_dir}: no such model folder (pass --model)")
    run, seed = options.run, options.seed
    passes, threshold, k = generate_passes(run, model_dir, options.passes, options.k, options.limit, seed)
    result = predictability(passes[:-1], passes[-1], threshold)
    print(f"{options.run} ({model_dir}): {int(result['prompts'])} prompts, groups of {k}, {options.passes} passes")
    print("| all-equal groups | predicted (mean) | AUC | prompts with pass rate < 0.1 or > 0.9 | "
          + " | ".join(f"all-equal among kept, {share:.0%} skipped" for share in SKIPPED_SHARES) + " |")  # fmt: skip
    print("|---" * (4 + len(SKIPPED_SHARES)) + "|")
    cells = [result["all_equal"], result["predicted"], result["auc"], result["extreme_rates"]]
    cells += [result[f"kept_all_equal_{share}"] for share in SKIPPED_SHARES]
    print("| " + " | ".join(f"{value:.3f}" for value in cells) + " |")


if __name__ == "__main__":
    main()
