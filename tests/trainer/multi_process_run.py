"""Run under `accelerate launch --num_processes W`: every scenario of `support.SCENARIOS`, then "local" again
resumed from its first checkpoint; one JSON file per rank and run."""

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
record = run_scenario("local", out / "resumed", world, world, resume_from=out / "local" / "run" / "checkpoint-1")
(out / "resumed" / f"rank{rank}.json").write_text(json.dumps(record))
