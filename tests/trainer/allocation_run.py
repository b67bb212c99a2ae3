"""Run under `accelerate launch` on 2 processes: rollout allocation by screening and from the history on the prompts
flagged by argv[2] (each generation batch is 4 prompts: 2 per process), each process's result written to
argv[1]/<mode>-rank<i>.json (screening also with dynamic sampling)."""

import json
import sys
from pathlib import Path

from accelerate import PartialState
from support import run_allocation
from test_allocation import BUDGET, HISTORY

out, flags = Path(sys.argv[1]), sys.argv[2]
screen = run_allocation(
    out / "screen", flags, rollout_allocation="screen", screen_size=2, per_device_train_batch_size=4
)
rank = PartialState().process_index  # after the trainer joined the process group
(out / f"screen-rank{rank}.json").write_text(json.dumps(screen))
screen_ds = run_allocation(
    out / "screen-ds",
    flags,
    rollout_allocation="screen",
    screen_size=2,
    per_device_train_batch_size=4,
    dynamic_sampling=True,
    max_generation_rounds=2,
)
(out / f"screen-ds-rank{rank}.json").write_text(json.dumps(screen_ds))
history = run_allocation(out / "history", flags, per_device_train_batch_size=4, generation_budget=2 * BUDGET, **HISTORY)
(out / f"history-rank{rank}.json").write_text(json.dumps(history))
PartialState().wait_for_everyone()
PartialState().destroy_process_group()
