"""Task names, known without importing a loader: the list of reasoning-gym's datasets stays equal to its registry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pods_rl.tasks.names import REASONING_GYM_DATASETS, check_task_name, list_tasks


def test_the_reasoning_gym_names_are_its_registry() -> None:
    """After an upgrade of reasoning-gym, regenerate the list from `sorted(reasoning_gym.factory.DATASETS)`."""
    from reasoning_gym.factory import DATASETS

    assert tuple(sorted(DATASETS)) == REASONING_GYM_DATASETS


@pytest.mark.parametrize("name", ["arithmetic", "gsm8k", "math", "reasoning-gym:gsm_symbolic", "reasoning-gym:ab"])
def test_known_names_pass(name: str) -> None:
    check_task_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "gsm9k",
            "unknown task 'gsm9k' (did you mean 'gsm8k'?); available: arithmetic, arithmetic-3term, gsm8k, math, "
            "reasoning-gym:<name>",
        ),
        ("chess", "unknown task 'chess'; available: arithmetic, arithmetic-3term, gsm8k, math, reasoning-gym:<name>"),
        ("reasoning-gym:", "unknown reasoning-gym dataset ''; available: ab, acre, "),
        ("reasoning-gym:sudokuu", "unknown reasoning-gym dataset 'sudokuu' (did you mean 'sudoku' or "),
    ],
)
def test_unknown_names_say_what_exists(name: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_task_name(name)
    assert str(raised.value).startswith(message)


def test_every_listed_task_but_the_gym_pattern_is_a_name() -> None:
    for name, _ in list_tasks():
        if not name.endswith("<name>"):
            check_task_name(name)


def test_names_need_no_loader() -> None:
    """Listing and checking names imports neither datasets nor reasoning-gym, nor any loader module."""
    code = (
        "import sys\n"
        "from pods_rl.tasks import list_tasks\n"
        "from pods_rl.tasks.names import check_task_name\n"
        "check_task_name('reasoning-gym:gsm_symbolic'); list_tasks()\n"
        "heavy = ('datasets', 'reasoning_gym', 'pods_rl.tasks.registry', 'pods_rl.tasks.base')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
