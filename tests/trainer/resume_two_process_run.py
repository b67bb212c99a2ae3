"""Run under `accelerate launch` on 2 processes: every scenario of `support.TWO_PROCESS_RESUMES` with
`support.run_resumable`, uninterrupted, resumed from its checkpoint, resumed again from the resumed run's checkpoint,
failing once in a reward function on process 1, and resumed from the checkpoint written after that failure. Each
run's result per process in argv[1]/<scenario>/<run>-rank<i>.json."""

import json
import os
import sys
from pathlib import Path

from accelerate import PartialState
from support import TWO_PROCESS_RESUMES, failing_once, flag_vowel_reward, run_resumable

rank = int(os.environ["RANK"])
for name, (flags, settings, first, second, (step, call)) in TWO_PROCESS_RESUMES.items():
    out = Path(sys.argv[1]) / name
    runs = [  # (run, checkpoint it resumes from, reward)
        ("full", None, flag_vowel_reward),
        ("once", out / "full" / f"checkpoint-{first}", flag_vowel_reward),
        ("twice", out / "once" / f"checkpoint-{second}", flag_vowel_reward),
        ("failed", None, failing_once(step, call, process=1)),
        ("after-failure", out / "failed" / f"checkpoint-{step}", flag_vowel_reward),
    ]
    for run, resume_from, reward in runs:
        result = run_resumable(out / run, flags, resume_from=resume_from, reward=reward, **settings)
        (out / f"{run}-rank{rank}.json").write_text(json.dumps(result))
# Leave the process group before exit (see two_process_run.py).
PartialState().wait_for_everyone()
PartialState().destroy_process_group()
