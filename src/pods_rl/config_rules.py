"""The rules PODSConfig's own fields obey (pool size n, trained size m, selection options), free of torch and TRL.

PODSConfig checks them when it is built, and the `pods` settings check them with the same code before TRL is
imported, so that a run whose m exceeds its n fails in a second, naming the setting. `TRL_DEFAULTS` are the
GRPOConfig defaults the rules read when a setting is absent (a test keeps them equal to TRL's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SELECTION_RULES = ("max_variance", "max_reward", "random")
ADVANTAGE_STATS = ("selected", "pool")
SELECTION_BUDGETS = ("per_prompt", "batch")
TIE_BREAKS = ("index", "shortest")
ROLLOUT_ALLOCATIONS = ("none", "screen", "history")
ALLOCATION_OBJECTIVES = ("variance", "informative", "knapsack_rl")  # see pods_rl.core.allocation; or "auto"

PODS_DEFAULTS: dict[str, Any] = {
    "num_selected": None,
    "selection_rule": "max_variance",
    "advantage_stats": "selected",
    "selection_budget": "per_prompt",
    "selection_tie_break": "index",
    "dynamic_sampling": False,
    "max_generation_rounds": 3,
    "rollout_allocation": "none",
    "screen_size": None,
    "screen_pass_rate_band": None,
    "success_threshold": 0.5,
    "generation_budget": None,
    "max_rollouts_per_prompt": None,
    "allocation_objective": "auto",
    "history_exploration": 0.1,
    "history_prior_successes": 1.0,
    "history_prior_failures": 1.0,
    "history_decay": 1.0,
}
# The allocation options each mode reads; setting one under another mode is a mistake worth a line.
SCREEN_FIELDS = ("screen_size", "screen_pass_rate_band")
HISTORY_FIELDS = (
    "generation_budget",
    "max_rollouts_per_prompt",
    "allocation_objective",
    "history_exploration",
    "history_prior_successes",
    "history_prior_failures",
    "history_decay",
)
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
        ("rollout_allocation", ROLLOUT_ALLOCATIONS),
        ("allocation_objective", ("auto", *ALLOCATION_OBJECTIVES)),
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
    _check_allocation_fields(values, section)


def check_async_fields(fields: Mapping[str, Any], *, section: str = "") -> None:
    """Raise ValueError naming the first of `fields` that an asynchronous trainer cannot apply: it scores one group
    of n at a time (`pods_rl.trainer.async_selection`), so nothing that needs several groups together or groups of
    another size. The rules of `check_selection_fields` apply besides."""
    values = {"scale_rewards": "group", "multi_objective_aggregation": "sum_then_normalize", **PODS_DEFAULTS, **fields}
    alone = "and each group is scored alone"
    refused = {  # name: (the values allowed, why another cannot apply)
        "selection_budget": (("per_prompt",), f"'batch' spreads rows over a block of groups, {alone}"),
        "rollout_allocation": (("none",), "it sizes each prompt's pool, and the worker generates n for every prompt"),
        "scale_rewards": (("group", "none", True, False), f"'batch' divides by a batch's std, {alone}"),
        "multi_objective_aggregation": (("sum_then_normalize",), f"'normalize_then_sum' scales over a batch, {alone}"),
    }
    for name, (allowed, why) in refused.items():
        if values[name] not in allowed:
            raise ValueError(f"{section}{name}={values[name]!r} cannot apply to asynchronous training: {why}.")


def _check_allocation_fields(values: Mapping[str, Any], section: str) -> None:
    """The rollout-allocation options (`pods_rl.core.allocation`) on their own and against n, m and the rule; `values`
    holds every field (defaults filled in), the names of the modes already checked."""
    mode = values["rollout_allocation"]
    n = values["num_generations"]
    m = values["num_selected"] or n
    for fields, needs in (
        (SCREEN_FIELDS, ("screen",)),
        (HISTORY_FIELDS, ("history",)),
        (("success_threshold",), ROLLOUT_ALLOCATIONS[1:]),
    ):
        for name in fields:
            if values[name] != PODS_DEFAULTS[name] and mode not in needs:
                wanted = " or ".join(repr(need) for need in needs)
                raise ValueError(
                    f"{section}{name} is an option of rollout_allocation={wanted}, got rollout_allocation={mode!r}."
                )
    threshold = values["success_threshold"]
    if threshold is not None and not math.isfinite(threshold):
        raise ValueError(
            f"{section}success_threshold must be a finite number or None (fractional rewards), got {threshold}."
        )
    if mode == "screen":
        size = values["screen_size"]
        if size is None:
            raise ValueError(
                f"{section}rollout_allocation='screen' needs screen_size, the rollouts each candidate prompt is "
                f"screened with (2 <= screen_size < num_generations = {n})."
            )
        if not 2 <= size < n:
            raise ValueError(
                f"{section}screen_size must satisfy 2 <= screen_size < num_generations (n={n}), got {size}: the screen "
                "is the first part of a pool of n, and fewer than 2 rollouts cannot vary."
            )
        band = values["screen_pass_rate_band"]
        if band is not None and not (len(band) == 2 and 0 <= band[0] <= band[1] <= 1):
            raise ValueError(
                f"{section}screen_pass_rate_band must be [low, high] with 0 <= low <= high <= 1, got {band}."
            )
    if mode == "history":
        if values["selection_rule"] != "max_variance":
            raise ValueError(
                f"{section}rollout_allocation='history' needs selection_rule='max_variance' (its values model what "
                f"max-variance selection keeps), got selection_rule={values['selection_rule']!r}."
            )
        largest = values["max_rollouts_per_prompt"]
        if largest is not None and largest < m:
            raise ValueError(
                f"{section}max_rollouts_per_prompt must be >= num_selected (m={m}): every trained prompt needs m "
                f"rollouts, got {largest}."
            )
        exploration = values["history_exploration"]
        if not 0 <= exploration <= 1:
            raise ValueError(f"{section}history_exploration must be a probability in [0, 1], got {exploration}.")
        for name in ("history_prior_successes", "history_prior_failures"):
            if not (math.isfinite(values[name]) and values[name] > 0):
                raise ValueError(f"{section}{name} (a Beta prior's pseudo-count) must be > 0, got {values[name]}.")
        decay = values["history_decay"]
        if not 0 < decay <= 1:
            raise ValueError(f"{section}history_decay must be in (0, 1] (1: every epoch counts alike), got {decay}.")


def allocation_objective(objective: str, scale_rewards: str | bool, aggregation: str) -> str:
    """The knapsack's objective in force: a named one as named; `"auto"` the one whose value is the expected squared
    norm of the advantages in use (`pods_rl.core.allocation`, part 1): `"informative"` where each group's advantages
    are divided by its own std (`scale_rewards="group"`, TRL's default, or `normalize_then_sum`, which normalises each
    reward function within its group), so that every varied group weighs alike; `"variance"` where they are not
    (`"none"`, Dr. GRPO; `"batch"`, one std for the whole step)."""
    if objective != "auto":
        return objective
    scale = {True: "group", False: "none"}.get(scale_rewards, scale_rewards)  # TRL's older spelling
    return "informative" if scale == "group" or aggregation == "normalize_then_sum" else "variance"


def check_vllm(use_vllm: bool, *, section: str = "") -> None:
    """Generation with vLLM needs vLLM installed (`make vllm`'s environment)."""
    from pods_rl.versions import vllm_installed  # here: the core imports this module and needs no transformers

    if use_vllm and not vllm_installed():
        raise ValueError(
            f"{section}use_vllm=True needs vLLM, which this environment lacks: `make vllm` builds one that has it "
            "(.venv-vllm; see docs/vllm.md)."
        )


def check_batch(
    rows_per_process: int,
    num_processes: int,
    n: int,
    m: int,
    budget: str,
    *,
    dynamic_sampling: bool = False,
    allocation: str = "none",
    generation_budget: int | None = None,
    max_rollouts: int | None = None,
    section: str = "",
) -> None:
    """The trained rows of a generation (`rows_per_process` on each of `num_processes`) hold whole groups of m, and
    each process generates a whole number of rollouts (and, for the batch budget, dynamic sampling and rollout
    allocation, whole pools); an allocation's generation budget fits the step."""
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
        f"rollout_allocation={allocation!r} plans each process's prompts on that process": allocation != "none",
    }
    for why, needed in needs_whole_pools.items():
        if needed and rows_per_process % m:
            raise ValueError(
                f"{section}{why}, so every prompt's pool must lie on one process: per_device_train_batch_size * "
                f"steps_per_generation ({rows_per_process}) must be a multiple of num_selected ({m})."
            )
    if allocation == "history" and generation_budget is not None:
        check_generation_budget(generation_budget, rows_per_process, num_processes, m, max_rollouts or n, section)


def check_generation_budget(
    budget: int, rows_per_process: int, num_processes: int, m: int, largest: int, section: str = ""
) -> None:
    """The history allocation's rollouts per generation: each process spreads its equal share over its own prompts,
    each of which needs m to m x ... `largest` rollouts."""
    rows, prompts = rows_per_process * num_processes, rows_per_process * num_processes // m
    if budget < rows:
        raise ValueError(
            f"{section}generation_budget ({budget}) is below the rows trained per generation ({rows}): every trained "
            f"prompt needs at least num_selected (m={m}) rollouts."
        )
    if budget > prompts * largest:
        raise ValueError(
            f"{section}generation_budget ({budget}) exceeds what the {prompts} prompts of a generation can take "
            f"({prompts} x max_rollouts_per_prompt {largest} = {prompts * largest})."
        )
    if budget % num_processes:
        raise ValueError(
            f"{section}generation_budget ({budget}) must be divisible by the {num_processes} processes: each spreads "
            "its share over its own prompts."
        )


def check_refill_steps(
    steps_per_generation: int,
    num_iterations: int,
    accumulation: int,
    max_steps: int,
    *,
    why: str = "dynamic_sampling",
    section: str = "",
) -> None:
    """Dynamic sampling (and rollout allocation) draws further prompts at the start of an optimizer step, so a
    generation must span whole optimizer steps; and those draws use up an epoch's prompts in fewer steps than the
    epoch holds, so the run is sized in steps."""
    if steps_per_generation * num_iterations % accumulation:
        raise ValueError(
            f"{section}{why} draws further generation batches at the start of an optimizer step: "
            f"steps_per_generation * num_iterations ({steps_per_generation * num_iterations}) must be a multiple of "
            f"gradient_accumulation_steps ({accumulation})."
        )
    if max_steps <= 0:
        raise ValueError(
            f"{section}{why} needs max_steps > 0: its refills use up an epoch in fewer optimizer steps than "
            "the epoch holds, so a run (and its learning-rate schedule) sized by num_train_epochs would end early."
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
        allocation=values["rollout_allocation"],
        generation_budget=values["generation_budget"],
        max_rollouts=values["max_rollouts_per_prompt"],
        section=section,
    )
    why = refill_reason(values["dynamic_sampling"], values["rollout_allocation"])
    if why is not None:
        steps = rows // values["per_device_train_batch_size"]  # steps_per_generation, as GRPOConfig derives it
        check_refill_steps(
            steps,
            values["num_iterations"],
            values["gradient_accumulation_steps"],
            values["max_steps"],
            why=why,
            section=section,
        )


def refill_reason(dynamic_sampling: bool, allocation: str) -> str | None:
    """The option that draws further prompts during a step (dynamic sampling, or an allocation mode), if any."""
    if dynamic_sampling:
        return "dynamic_sampling"
    return None if allocation == "none" else f"rollout_allocation={allocation!r}"


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
