"""Run under `accelerate launch --num_processes 2 --cpu`: each prompt's pool of 8 spans both processes."""

import json
import sys
from pathlib import Path

from support import char_tokenizer, fast_args, prompt_dataset, tiny_llama, vowel_reward

from pods_rl import PODSConfig, PODSTrainer

out = Path(sys.argv[1])
pools: list[list[float]] = []


def recording_reward(completions, **kwargs):
    rewards = vowel_reward(completions)
    pools.append(rewards)
    return rewards


tokenizer = char_tokenizer()
# One trained row per process per generation: 2 rows = 1 prompt of m=2, its pool of n=8 split 4 + 4.
args = PODSConfig(
    **fast_args(output_dir=str(out / "run"), num_generations=8, num_selected=2, per_device_train_batch_size=1)
)
trainer = PODSTrainer(
    model=tiny_llama(tokenizer),
    reward_funcs=recording_reward,
    args=args,
    train_dataset=prompt_dataset(),
    processing_class=tokenizer,
)
trained = []
original = trainer._generate_and_score_completions


def spy(inputs):
    output = original(inputs)
    ids = [row[mask.bool()] for row, mask in zip(output["completion_ids"], output["completion_mask"], strict=True)]
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    trained.append({"rewards": vowel_reward(texts), "advantages": output["advantages"].tolist()})
    return output


trainer._generate_and_score_completions = spy
trainer.train()
rank = trainer.accelerator.process_index
record = {
    "pools": pools,
    "trained": trained,
    "params_sum": float(sum(p.detach().double().sum() for p in trainer.model.parameters())),
}
(out / f"rank{rank}.json").write_text(json.dumps(record))
