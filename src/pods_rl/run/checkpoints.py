"""Which checkpoint `pods train --resume` continues from: the newest one that is intact, every file the resume reads
there and readable, so that a damaged copy (a disk that filled, a partial rsync) falls back to an earlier checkpoint
with one warning line instead of a traceback from deep inside the load.

The check loads nothing and reads little: JSON files are parsed (and the ones pods-rl reads hold their keys);
safetensors files have their header read by `safe_open`, which also refuses a file shorter than its tensors need;
torch's `.pt`/`.pth`/`.bin` files are zip archives, whose central directory (at the end, so lost to any
truncation) is read, whose records must lie inside the file, and whose pickle is read with its CRC checked. Bytes
changed inside a tensor's data (a bit flip) are not detected: the tensors themselves are not read.

Checkpoints are written atomically (`PODSTrainer._save_checkpoint`), so damage comes from outside: a copy, a full
disk, a user. Staging folders (`_tmp-checkpoint-N`, a save that was killed) are never candidates.
"""

from __future__ import annotations

import json
import zipfile
from fnmatch import fnmatch
from pathlib import Path

from safetensors import SafetensorError, safe_open

from pods_rl.run.settings import SettingsError

# What a checkpoint must hold, each as the names (glob patterns) any one of which will do: the Trainer's state, the
# weights (whole, sharded, an adapter, FSDP's or DeepSpeed's), and the training state a resume restores exactly
# (absent from a `save_only_model` checkpoint). DeepSpeed keeps its optimizer and scheduler in `global_step*/`.
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
REQUIRED = (("trainer_state.json",), (*WEIGHTS, "pytorch_model_fsdp*", "global_step*"))
TRAINING_STATE = (
    ("optimizer.pt", "optimizer*", "global_step*"),
    ("scheduler.pt", "global_step*"),
    ("rng_state.pth", "rng_state_*.pth"),
    ("pods_data_state.json",),
    ("pods_rng_state.safetensors",),
)
# An asynchronous run's training state (`pods train --async`): TRL's rollout position instead of the synchronous
# trainer's data and sampler state, and which groups were trained and dropped (trainer/async_trainer.py).
ASYNC_TRAINING_STATE = (*TRAINING_STATE[:3], ("rollout_state.json",), ("async_state.json",))
# The files a resume reads, checked wherever they are in the checkpoint (tokenizer files and training_args.bin are
# not read).
READ = ("*.safetensors", "*.pt", "*.pth", "optimizer*.bin", "pytorch_model*.bin", "*.index.json", "trainer_state.json")
READ += ("config.json", "adapter_config.json", "pods_*.json")
READ += ("rollout_state.json", "async_state.json")
JSON_KEYS = {
    "trainer_state.json": ("global_step", "stateful_callbacks"),
    "pods_data_state.json": ("epoch", "position"),
    "rollout_state.json": ("prompt_index", "model_version"),
    "async_state.json": ("start", "trained_groups", "dropped_groups"),
}


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.split("-")[1])


def checkpoints(output_dir: Path) -> list[Path]:
    """Every `checkpoint-N` folder of a run, the newest first."""
    found = [p for p in Path(output_dir).glob("checkpoint-*") if p.name.split("-")[1].isdigit() and p.is_dir()]
    return sorted(found, key=step_of, reverse=True)


def damage(checkpoint: Path, *, model_only: bool = False, asynchronous: bool = False) -> str | None:
    """What is wrong with `checkpoint` (the first problem found, e.g. 'scheduler.pt is missing'), or None when it
    is intact. `model_only`: the run saves only the model (`save_only_model`); `asynchronous`: an asynchronous run's
    checkpoint."""
    names = [path.name for path in checkpoint.iterdir()]
    state = ASYNC_TRAINING_STATE if asynchronous else TRAINING_STATE
    for alternatives in REQUIRED if model_only else REQUIRED + state:
        if not any(fnmatch(name, pattern) for name in names for pattern in alternatives):
            return f"{alternatives[0]} is missing"
    for path in sorted(checkpoint.rglob("*")):
        if path.is_file() and any(fnmatch(path.name, pattern) for pattern in READ):
            problem = _file_damage(path)
            if problem is not None:
                return f"{path.relative_to(checkpoint)}: {problem}"
    return None


def resume_point(output_dir: Path, *, model_only: bool = False, asynchronous: bool = False) -> tuple[Path, str | None]:
    """The checkpoint `--resume` continues from, the newest intact one, and a warning line when newer ones are
    damaged (naming the file and the steps trained again). Raises SettingsError (one line) when the run has no
    checkpoint or none is intact."""
    start_again = (
        f"start the run again with `pods train --config {output_dir}/config.yaml --output-dir {output_dir} "
        "--overwrite`, which replaces its records"
    )
    found = checkpoints(output_dir)
    if not found:
        raise SettingsError(f"--resume {output_dir}: the run has no checkpoint to continue from; {start_again}.")
    damaged: list[tuple[Path, str]] = []
    for checkpoint in found:
        problem = damage(checkpoint, model_only=model_only, asynchronous=asynchronous)
        if problem is None:
            break
        damaged.append((checkpoint, problem))
    else:
        listed = "; ".join(f"{path.name}: {problem}" for path, problem in damaged)
        raise SettingsError(f"--resume {output_dir}: no checkpoint is intact ({listed}); {start_again}.")
    if not damaged:
        return checkpoint, None
    listed = ", ".join(f"{path.name} ({problem})" for path, problem in damaged)
    first, last = step_of(checkpoint) + 1, step_of(damaged[0][0])
    steps = f"step {first} is" if first == last else f"steps {first}-{last} are"
    verb = "is" if len(damaged) == 1 else "are"
    return checkpoint, f"{listed} {verb} damaged: resuming from {checkpoint.name}, so {steps} trained again."


def _file_damage(path: Path) -> str | None:
    """Why `path` cannot be read as what its name says, or None."""
    kind = {".json": "not JSON", ".safetensors": "not safetensors"}.get(path.suffix, "not a complete torch archive")
    try:
        if path.suffix == ".json":
            return _json_damage(path)
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="numpy"):
                return None
        return _archive_damage(path)
    except (OSError, ValueError, zipfile.BadZipFile, SafetensorError) as error:
        text = str(error).strip() or type(error).__name__
        return f"{kind} ({text.splitlines()[0][:160]})"


def _json_damage(path: Path) -> str | None:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        return "not a JSON object"
    missing = [key for key in JSON_KEYS.get(path.name, ()) if key not in data]
    if path.name.endswith(".index.json"):
        missing += [] if "weight_map" in data else ["weight_map"]
        absent = sorted({name for name in data.get("weight_map", {}).values() if not (path.parent / name).is_file()})
        if absent:
            return f"names {absent[0]}, which is missing"
    return f"lacks {', '.join(missing)}" if missing else None


def _archive_damage(path: Path) -> str | None:
    """torch.save's zip archive: its directory, every record inside the file, and its pickle's CRC."""
    size = path.stat().st_size
    with zipfile.ZipFile(path) as archive:
        records = archive.infolist()
        for record in records:
            if record.header_offset + record.compress_size > size:
                return f"record {record.filename} lies past the end of the file"
        pickles = [record for record in records if record.filename.endswith("data.pkl")]
        if not pickles:
            return "holds no data.pkl: not a torch.save file"
        archive.read(pickles[0])  # BadZipFile when its CRC does not match
    return None
