"""Arithmetic: a task generated offline, small enough for a tiny model to learn and improve on a CPU.

Expressions such as ``3+4*2`` over single- or multi-digit integers, with the usual precedence
(``*`` before ``+``/``-``, then left to right). Everything is deterministic from the seed, so the
same options always give the same train/test split, and no expression occurs in both. `arithmetic-3term` is
one fixed variant, named because SmolLM2-135M has room to grow on it (see `load_three_term_sums`).
"""

from __future__ import annotations

import random

from datasets import Dataset

from pods_rl.tasks.base import SYSTEM_PROMPT, Task

OPERATORS = "+-*"


def _check_options(num_train: int, num_test: int, operands: tuple[int, ...], digits: int, operators: str) -> None:
    if num_train < 1:
        raise ValueError(f"num_train must be >= 1, got {num_train}")
    if num_test < 1:
        raise ValueError(f"num_test must be >= 1, got {num_test}")
    if not operands or any(not isinstance(k, int) or k < 2 for k in operands):
        raise ValueError(f"operands must be a non-empty tuple of integers >= 2, got {operands!r}")
    if not isinstance(digits, int) or not 1 <= digits <= 3:
        raise ValueError(f"digits must be 1, 2 or 3, got {digits!r}")
    if not operators or any(op not in OPERATORS for op in operators) or len(set(operators)) != len(operators):
        raise ValueError(f"operators must be distinct characters from {OPERATORS!r}, got {operators!r}")
    space = sum((10**digits) ** k * len(operators) ** (k - 1) for k in set(operands))
    if num_train + num_test > space:
        raise ValueError(
            f"num_train + num_test = {num_train + num_test} exceeds the {space} distinct expressions "
            f"for operands={operands}, digits={digits}, operators={operators!r}"
        )


def solution_steps(expression: str) -> list[tuple[str, int]]:
    """The worked steps ``("4*2", 8), ("3+8", 11)`` that evaluate `expression` one operation at a time.

    Multiplications first (left to right), then additions and subtractions left to right; the last
    step's value is the answer. Only the single-digit-token syntax this module generates is parsed.
    """
    tokens: list[str] = []
    for ch in expression:
        if ch in OPERATORS and tokens and tokens[-1] not in OPERATORS:
            tokens.append(ch)
        elif tokens and tokens[-1] not in OPERATORS:
            tokens[-1] += ch
        else:
            tokens.append(ch)
    values = [int(t) for t in tokens[0::2]]
    ops = list(tokens[1::2])
    steps = []
    while ops:
        i = ops.index("*") if "*" in ops else 0
        a, op, b = values[i], ops[i], values[i + 1]
        result = a * b if op == "*" else a + b if op == "+" else a - b
        steps.append((f"{a}{op}{b}", result))
        values[i : i + 2] = [result]
        del ops[i]
    return steps


def demonstration(expression: str, *, flawed: bool = False) -> str:
    """A worked answer in the system prompt's format: the steps inside <think>, the result in <answer>.

    `flawed=True` does all the work but answers the first step's value instead of the last: a plausible
    slip, used to give a warm start a flaw that RL can then find and fix.
    """
    steps = solution_steps(expression)
    lines = "\n".join(f"{lhs}={value}" for lhs, value in steps)
    answer = steps[0][1] if flawed else steps[-1][1]
    return f"<think>\n{lines}\n</think>\n<answer>\n{answer}\n</answer>"


def sft_dataset(dataset: Dataset, *, flawed_fraction: float = 0.0, seed: int = 0) -> Dataset:
    """Prompt-completion SFT rows (TRL conversational) demonstrating `dataset`'s questions.

    A `flawed_fraction` of the multi-step questions is demonstrated with the first step's value as the
    answer, so a model fitted to these rows computes every step but answers wrongly with that probability.
    """
    if not 0.0 <= flawed_fraction <= 1.0:
        raise ValueError(f"flawed_fraction must be in [0, 1], got {flawed_fraction}")
    rng = random.Random(seed)
    completions = []
    for expression in dataset["expression"]:
        flawed = len(solution_steps(expression)) > 1 and rng.random() < flawed_fraction
        completions.append([{"role": "assistant", "content": demonstration(expression, flawed=flawed)}])
    return Dataset.from_dict({"prompt": dataset["prompt"], "completion": completions})


def _random_expression(rng: random.Random, num_operands: int, digits: int, operators: str) -> str:
    numbers = [str(rng.randrange(10**digits)) for _ in range(num_operands)]
    ops = [rng.choice(operators) for _ in range(num_operands - 1)]
    return numbers[0] + "".join(op + n for op, n in zip(ops, numbers[1:], strict=True))


def _to_dataset(expressions: list[str], system_prompt: str) -> Dataset:
    prompts = [
        [{"role": "system", "content": system_prompt}, {"role": "user", "content": f"Compute {e}."}]
        for e in expressions
    ]
    answers = [str(solution_steps(e)[-1][1]) for e in expressions]
    return Dataset.from_dict({"prompt": prompts, "answer": answers, "expression": expressions})


def load_arithmetic(
    *,
    seed: int = 0,
    num_train: int = 2000,
    num_test: int = 200,
    operands: tuple[int, ...] | list[int] = (2, 3),
    digits: int = 1,
    operators: str = OPERATORS,
    system_prompt: str = SYSTEM_PROMPT,
) -> Task:
    """Generate the arithmetic task: each question draws its operand count uniformly from `operands`."""
    operands = tuple(operands)
    _check_options(num_train, num_test, operands, digits, operators)
    from pods_rl import rewards  # lazy: rewards import the grader

    rng = random.Random(seed)
    seen: set[str] = set()
    expressions: list[str] = []
    while len(expressions) < num_train + num_test:
        e = _random_expression(rng, rng.choice(operands), digits, operators)
        if e not in seen:
            seen.add(e)
            expressions.append(e)
    test, train = expressions[:num_test], expressions[num_test:]
    options = dict(
        seed=seed,
        num_train=num_train,
        num_test=num_test,
        operands=operands,
        digits=digits,
        operators=operators,
    )
    return Task(
        name="arithmetic",
        train=_to_dataset(train, system_prompt),
        test=_to_dataset(test, system_prompt),
        system_prompt=system_prompt,
        reward_funcs=list(rewards.REWARD_FUNCS),
        reward_weights=list(rewards.REWARD_WEIGHTS),
        options=options,
    )


def load_three_term_sums(
    *, seed: int = 0, num_train: int = 800, num_test: int = 200, system_prompt: str = SYSTEM_PROMPT
) -> Task:
    """Task `arithmetic-3term`: a+b+c over one-digit numbers; by default all 1000 of them, 800 to train, 200 held out.

    Named for SmolLM2-135M-Instruct on a CPU: it answers 18.5% of the held-out ones right against about half of the a+b
    sums, often stopping at a+b's value (docs/benchmarks/presets.md, "SmolLM2-135M on a CPU"), so RL has room to lift
    it.
    """
    task = load_arithmetic(
        seed=seed,
        num_train=num_train,
        num_test=num_test,
        operands=(3,),
        digits=1,
        operators="+",
        system_prompt=system_prompt,
    )
    task.name = "arithmetic-3term"
    return task
