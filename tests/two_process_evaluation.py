"""Run under `accelerate launch` on two CPU processes: each evaluates its share of the questions and writes what
`evaluate` returned and which answers its reward saw. The test imports the model, data and reward from here."""

import json
import sys
from pathlib import Path

from datasets import Dataset

from pods_rl.models.tiny import TinyRecipe, build_model, build_tokenizer

EVAL_KWARGS = {"max_new_tokens": 6, "batch_size": 2, "num_samples": 1}


def model_and_tokenizer():
    tokenizer = build_tokenizer()
    return build_model(TinyRecipe(hidden_size=16, intermediate_size=32, num_heads=2), tokenizer), tokenizer


def questions(count: int) -> Dataset:
    """Prompts of equal length (one digit), so a row's padding does not depend on which batch it lands in."""
    prompts = [[{"role": "user", "content": f"Compute {i}+{i}."}] for i in range(count)]
    return Dataset.from_dict({"prompt": prompts, "answer": [str(2 * i) for i in range(count)]})


def graded_reward(seen: list[str]):
    """A reward that depends on the row and on the completion, in quarters (sums are exact in any order)."""

    def reward(completions, answer, **kwargs):
        seen.extend(answer)
        texts = [c[0]["content"] for c in completions]
        return [float(int(a) % 3 == 0) + 0.25 * (len(t) % 4) for a, t in zip(answer, texts, strict=True)]

    return reward


if __name__ == "__main__":
    import torch.distributed as dist

    from pods_rl.evaluation import evaluate

    dist.init_process_group("gloo")
    model, tokenizer = model_and_tokenizer()
    seen: list[str] = []
    results = evaluate(model, tokenizer, questions(9), reward=graded_reward(seen), sharded=True, **EVAL_KWARGS)
    Path(sys.argv[1], f"rank{dist.get_rank()}.json").write_text(json.dumps({"results": results, "seen": seen}))
    dist.destroy_process_group()
