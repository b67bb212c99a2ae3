"""Run under `accelerate launch --num_processes W`: every scenario of `support.SCENARIOS`, one JSON file per rank."""

import json
import os
import sys
from pathlib import Path

from support import SCENARIOS, run_scenario

out = Path(sys.argv[1])
world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
for name in SCENARIOS:
    record = run_scenario(name, out / name, num_processes=world, world_size=world)
    (out / name / f"rank{rank}.json").write_text(json.dumps(record))
