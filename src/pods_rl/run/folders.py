"""Run folders: naming, what counts as a run, and the rules for reusing one (`--resume`, `--overwrite`); and
whether the model a run names can be had.

Kept free of torch and TRL, so that `pods train` refuses a wrong folder in a second. A folder is only ever deleted
when it holds a run (a `config.yaml` of run settings) and the user asked for `--overwrite`.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from pods_rl.hub import hub_unusable, in_hub_cache
from pods_rl.run.lock import RUN_LOCK
from pods_rl.run.settings import RunSettings, SettingsError, read_yaml

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"  # written last: a run folder that holds it is a finished run
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
BUILTIN_MODEL_NAMES = ("tiny", "smollm2-135m")  # pods_rl.models.BUILTIN_MODELS, without importing torch


def default_output_dir(settings: RunSettings) -> Path:
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{settings.task}-{Path(settings.model).name}".replace(":", "_")
    return Path("runs") / name


def check_model_name(name: str) -> None:
    """A built-in model, a local folder, or a hub id that can be downloaded now or was before (the hub is probed
    only for a hub id: offline, a model that is not in the cache fails here, before anything loads)."""
    if name in BUILTIN_MODEL_NAMES or Path(name).exists():
        return
    if not HUB_ID.match(name):
        raise SettingsError(
            f"Unknown model {name!r}: use a built-in model {sorted(BUILTIN_MODEL_NAMES)}, a local folder, or a "
            "Hugging Face hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'."
        )
    unusable = hub_unusable()
    if unusable is not None and not in_hub_cache(name):
        raise SettingsError(
            f"Model {name!r} is neither built in nor a local folder, and the Hugging Face hub cannot be used to "
            f"download it ({unusable}); it is not in the hub cache either: use a built-in model "
            f"{sorted(BUILTIN_MODEL_NAMES)} (see `pods models`) or a local folder."
        )


def holds_run(folder: Path) -> bool:
    """Whether `folder` holds a run of ours: a config.yaml that reads as run settings."""
    try:
        RunSettings.from_dict(read_yaml(Path(folder) / CONFIG_FILE), checks="portable")
    except (SettingsError, OSError):
        return False
    return True


def check_output_dir(output_dir: Path, *, overwrite: bool, marker: str = CONFIG_FILE, what: str = "run") -> bool:
    """Whether `output_dir` may be used for a new run; True when a previous run there must be replaced first.

    Deletes nothing: the caller replaces the folder with `replace_output_dir` once every other check has passed.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise SettingsError(f"Output directory {output_dir} is a file, not a folder.")
    if not output_dir.exists() or all(path.name == RUN_LOCK for path in output_dir.iterdir()):
        return False  # empty, or holding only the lock of a start that was killed (or is under way: see RUN_LOCK)
    is_ours = holds_run(output_dir) if marker == CONFIG_FILE else (output_dir / marker).is_file()
    if not is_ours:
        raise SettingsError(
            f"Output directory {output_dir} holds files but no {what} (no {marker}): it is not replaced even with "
            "--overwrite; choose another --output-dir."
        )
    if not overwrite:
        raise SettingsError(
            f"Output directory {output_dir} already holds a {what}: pass --resume {output_dir} to continue it or "
            "--overwrite to replace it."
        )
    return True


def replace_output_dir(output_dir: Path, *, replace: bool) -> None:
    """Empty the folder of the previous run (checked by `check_output_dir`) and create it. The folder's lock
    (`RUN_LOCK`, held by the process that replaces it) stays."""
    if replace:
        for path in Path(output_dir).iterdir():
            if path.name == RUN_LOCK:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    Path(output_dir).mkdir(parents=True, exist_ok=True)


def load_settings_of(output_dir: Path) -> RunSettings:
    """The settings a run in `output_dir` was started with (what `--resume` continues with)."""
    path = Path(output_dir) / CONFIG_FILE
    if not path.is_file():
        raise SettingsError(f"--resume {output_dir}: no run there ({CONFIG_FILE} is missing).")
    return RunSettings.from_dict(read_yaml(path), where=str(path))
