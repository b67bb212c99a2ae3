"""Run under `accelerate launch` on 2 processes: pools of 8 span both (with `batch`: each holds whole pools)."""

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
if sys.argv[2:] == ["batch"]:
    # Four trained rows per process: 2 prompts of m=2 each, their pools of n=4 whole on the process; the row budget
    # is spread over each process's own 2 prompts.
    sizes = dict(num_generations=4, num_selected=2, per_device_train_batch_size=4, selection_budget="batch")
else:
    # One trained row per process per generation: 2 rows = 1 prompt of m=2, its pool of n=8 split 4 + 4.
    sizes = dict(num_generations=8, num_selected=2, per_device_train_batch_size=1)
args = PODSConfig(**fast_args(output_dir=str(out / "run"), **sizes))
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
# Leave the process group before exit: without it a rank sometimes aborted at interpreter exit ("terminate called
# without an active exception") after writing its record, failing the launch.
trainer.accelerator.wait_for_everyone()
trainer.accelerator.end_training()
