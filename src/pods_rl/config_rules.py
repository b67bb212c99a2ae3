"""The rules PODSConfig's own fields obey (pool size n, trained size m, selection options), free of torch and TRL.

PODSConfig checks them when it is built, and the `pods` settings check them with the same code before TRL is
imported, so that a run whose m exceeds its n fails in a second, naming the setting. `TRL_DEFAULTS` are the
GRPOConfig defaults the rules read when a setting is absent (a test keeps them equal to TRL's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SELECTION_RULES = ("max_variance", "max_reward", "random")
ADVANTAGE_STATS = ("selected", "pool")
SELECTION_BUDGETS = ("per_prompt", "batch")
TIE_BREAKS = ("index", "shortest")

PODS_DEFAULTS: dict[str, Any] = {
    "num_selected": None,
    "selection_rule": "max_variance",
    "advantage_stats": "selected",
    "selection_budget": "per_prompt",
    "selection_tie_break": "index",
    "dynamic_sampling": False,
    "max_generation_rounds": 3,
}
TRL_DEFAULTS: dict[str, Any] = {
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_generation": None,
    "generation_batch_size": None,
    "use_vllm": False,
    "num_iterations": 1,
    "max_steps": -1,
}


def check_selection_fields(fields: Mapping[str, Any], *, section: str = "") -> None:
    """Raise ValueError naming the first of `fields` (PODSConfig fields, absent ones at their defaults) that breaks a
    rule of n, m and the selection options; `section` prefixes the names (e.g. "trainer.")."""
    values = {**TRL_DEFAULTS, **PODS_DEFAULTS, **fields}
    n, m = values["num_generations"], values["num_selected"]
    if n is None or n < 2:
        raise ValueError(f"{section}num_generations (the pool size n) must be >= 2, got {n}.")
    if m is not None and not 2 <= m <= n:
        raise ValueError(
            f"{section}num_selected (m) must satisfy 2 <= m <= num_generations (n={n}), got {m}: a group of one has "
            "zero variance, so its advantage is always 0."
        )
    for name, allowed in (
        ("selection_rule", SELECTION_RULES),
        ("selection_budget", SELECTION_BUDGETS),
        ("selection_tie_break", TIE_BREAKS),
        ("advantage_stats", ADVANTAGE_STATS),
    ):
        if values[name] not in allowed:
            raise ValueError(f"{section}{name} must be one of {allowed}, got {values[name]!r}.")
    if values["max_generation_rounds"] < 1:
        raise ValueError(f"{section}max_generation_rounds must be >= 1, got {values['max_generation_rounds']}.")
    for name in ("selection_budget", "selection_tie_break"):
        if values[name] != PODS_DEFAULTS[name] and values["selection_rule"] != "max_variance":
            raise ValueError(
                f"{section}{name}={values[name]!r} needs selection_rule='max_variance' (it optimises the selected "
                f"variance), got selection_rule={values['selection_rule']!r}."
            )


def check_vllm(use_vllm: bool, *, section: str = "") -> None:
    """Generation with vLLM needs vLLM installed (`make vllm`'s environment)."""
    from pods_rl.versions import vllm_installed  # here: the core imports this module and needs no transformers

    if use_vllm and not vllm_installed():
        raise ValueError(
            f"{section}use_vllm=True needs vLLM, which this environment lacks: `make vllm` builds one that has it "
            "(.venv-vllm; see the README)."
        )


def check_batch(
    rows_per_process: int,
    num_processes: int,
    n: int,
    m: int,
    budget: str,
    *,
    dynamic_sampling: bool = False,
    section: str = "",
) -> None:
    """The trained rows of a generation (`rows_per_process` on each of `num_processes`) hold whole groups of m, and
    each process generates a whole number of rollouts (and, for the batch budget and dynamic sampling, whole pools)."""
    if rows_per_process * num_processes % m:
        raise ValueError(
            f"{section}per_device_train_batch_size * steps_per_generation * processes ({rows_per_process} * "
            f"{num_processes}), the rows trained per generation, must be divisible by num_selected (m={m}): the update "
            "trains whole groups of m rollouts."
        )
    if rows_per_process * n % m:
        raise ValueError(
            f"{section}per_device_train_batch_size * steps_per_generation ({rows_per_process}) * num_generations "
            f"({n}) must be divisible by num_selected ({m}), so that each process generates a whole number of rollouts."
        )
    needs_whole_pools = {
        "selection_budget='batch' spreads each process's rows over its own prompts": budget == "batch",
        "dynamic_sampling keeps or drops whole pools on the process that generated them": dynamic_sampling,
    }
    for why, needed in needs_whole_pools.items():
        if needed and rows_per_process % m:
            raise ValueError(
                f"{section}{why}, so every prompt's pool must lie on one process: per_device_train_batch_size * "
                f"steps_per_generation ({rows_per_process}) must be a multiple of num_selected ({m})."
            )


def check_refill_steps(
    steps_per_generation: int, num_iterations: int, accumulation: int, max_steps: int, *, section: str = ""
) -> None:
    """Dynamic sampling refills at the start of an optimizer step, so a generation must span whole optimizer steps;
    and its refills use up an epoch's prompts in fewer steps than the epoch holds, so the run is sized in steps."""
    if max_steps <= 0:
        raise ValueError(
            f"{section}dynamic_sampling needs max_steps > 0: its refills use up an epoch in fewer optimizer steps than "
            "the epoch holds, so a run (and its learning-rate schedule) sized by num_train_epochs would end early."
        )
    if steps_per_generation * num_iterations % accumulation:
        raise ValueError(
            f"{section}dynamic_sampling draws further generation batches at the start of an optimizer step: "
            f"steps_per_generation * num_iterations ({steps_per_generation * num_iterations}) must be a multiple of "
            f"gradient_accumulation_steps ({accumulation})."
        )


def check_batch_fields(fields: Mapping[str, Any], num_processes: int, *, section: str = "") -> None:
    """`check_batch` on PODSConfig fields (absent ones at their defaults), before GRPOConfig derives the rows."""
    rows = rows_per_process(fields, num_processes)
    if rows is None:
        return
    values = {**TRL_DEFAULTS, **PODS_DEFAULTS, **fields}
    n = values["num_generations"]
    check_batch(
        rows,
        num_processes,
        n,
        values["num_selected"] or n,
        values["selection_budget"],
        dynamic_sampling=values["dynamic_sampling"],
        section=section,
    )
    if values["dynamic_sampling"]:
        steps = rows // values["per_device_train_batch_size"]  # steps_per_generation, as GRPOConfig derives it
        check_refill_steps(
            steps,
            values["num_iterations"],
            values["gradient_accumulation_steps"],
            values["max_steps"],
            section=section,
        )


def rows_per_process(fields: Mapping[str, Any], num_processes: int) -> int | None:
    """The rows each process trains per generation, as GRPOConfig derives them from the batch fields (None where they
    contradict each other, which GRPOConfig reports itself)."""
    values = {**TRL_DEFAULTS, **fields}
    per_device, steps, total = (
        values["per_device_train_batch_size"],
        values["steps_per_generation"],
        values["generation_batch_size"],
    )
    if per_device < 1:
        return None
    if total is None:
        return per_device * (steps or values["gradient_accumulation_steps"])
    if steps is not None or total % (per_device * num_processes):
        return None
    return total // num_processes
