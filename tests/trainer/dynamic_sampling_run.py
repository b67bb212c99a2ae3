"""Run under `accelerate launch` on 2 processes: dynamic sampling on the prompts flagged by argv[2] (each generation
batch is 4 prompts: 2 groups per process), each process's result written to argv[1]/rank<i>.json."""

import json
import sys
from pathlib import Path

from accelerate import PartialState
from support import run_dynamic_sampling

out, flags = Path(sys.argv[1]), sys.argv[2]
run = run_dynamic_sampling(out / "run", flags, num_selected=2, per_device_train_batch_size=4, max_generation_rounds=3)
(out / f"rank{PartialState().process_index}.json").write_text(json.dumps(run))
