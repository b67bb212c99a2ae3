"""Reward functions read model output, which is untrusted: random and adversarial completions must each get a
finite float in [0, 1], quickly, with no side effects (no files created, no environment changed)."""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pods_rl import grading, rewards
from pods_rl.tasks import load_task

# A hang guard, not a speed test: each grader call is cut at grading.CALL_TIMEOUT_S (1 s) and its worker restarted,
# which took up to 2.1 s in all on a busy 2-core CPU; without the cut, an adversarial exponent never returns.
SECONDS_PER_COMPLETION = 10 * grading.CALL_TIMEOUT_S
ANSWERS = ["42", "-3", "\\frac{1}{2}", "0.75", "(1,-1)", "x^2+1", "\\sqrt{2}"]
ADVERSARIAL = [
    "<think>" * 5000,
    "<answer>" * 3000 + "</answer>" * 3000,
    "\\boxed{" * 5000 + "}" * 4999,
    "{" * 20000,
    "9" * 100_000,
    "<answer>" + "9" * 100_000 + "</answer>",
    "<answer>9^9^9^9^9</answer>",
    "<answer>10**10**10**10</answer>",
    "<answer>2^{2^{2^{2^{2^{2}}}}}</answer>",
    "<answer>1e999999</answer>",
    "<answer>\\frac{1}{0}</answer>",
    "<answer>0/0</answer>",
    "<answer>nan</answer>",
    "<answer>-inf</answer>",
    "<answer>__import__('os').system('touch pwned')</answer>",
    "<answer>open('pwned', 'w').write('x')</answer>",
    "<answer>exec(\"import os; os.makedirs('pwned')\")</answer>",
    "<answer>[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[</answer>",
    "<answer>" + "(" * 3000 + "1" + ")" * 3000 + "</answer>",
    "<answer>\\sqrt{" * 2000 + "2" + "}" * 2000 + "</answer>",
    "<answer>${HOME} %s%n %x \x00 \u202e ../../etc/passwd</answer>",
    "\\boxed{\\text{" + "a" * 50_000 + "}}",
    "1,2" * 30_000,
    "\ud7ff\ue000\U0010ffff" * 1000,
]
FRAGMENTS = [
    "<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "\\frac{", "\\sqrt{", "}", "{", "(", ")", "[", "]",
    "^", "**", "/", "-", ".", ",", "e", "9", "0", "1,234", "inf", "nan", "x", " ", "\n", "__import__", "'",
]  # fmt: skip
TEXTS = st.one_of(
    st.text(max_size=400),
    st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join),
    st.sampled_from(ADVERSARIAL),
)


def _gym_accuracy() -> Callable[..., list[float]]:
    """spiral_matrix's accuracy: its scorer parses the answer as a matrix, the riskiest gym scorer to fuzz."""
    task = load_task("reasoning-gym:spiral_matrix", num_train=1, num_test=1)
    entry = task.train["rg_entry"][0]

    def accuracy(completions: list, **kwargs) -> list[float]:
        return task.reward_funcs[0](completions, answer=[""] * len(completions), rg_entry=[entry] * len(completions))

    accuracy.__name__ = "reasoning-gym:spiral_matrix accuracy"
    return accuracy


@pytest.fixture(scope="module")
def reward_funcs() -> list[Callable[..., list[float]]]:
    return [*rewards.REWARD_FUNCS, _gym_accuracy()]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Iterator[tuple[Path, Path]]:
    """An empty working directory and temporary directory, to catch any file a reward function creates."""
    work, temp = tmp_path_factory.mktemp("cwd"), tmp_path_factory.mktemp("tmp")
    previous_cwd, previous_tempdir = Path.cwd(), tempfile.tempdir
    os.chdir(work)
    tempfile.tempdir = str(temp)
    try:
        yield work, temp
    finally:
        os.chdir(previous_cwd)
        tempfile.tempdir = previous_tempdir


def check(func: Callable[..., list[float]], completions: list, answers: list[str], sandbox: tuple[Path, Path]) -> None:
    environment = dict(os.environ)
    start = time.monotonic()
    scores = func(completions, answer=answers)
    elapsed = time.monotonic() - start
    name = func.__name__
    assert elapsed < SECONDS_PER_COMPLETION * len(completions), f"{name} took {elapsed:.1f}s"
    assert len(scores) == len(completions), name
    assert all(isinstance(s, float) and math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores), (name, scores)
    assert all(not any(folder.iterdir()) for folder in sandbox), f"{name} created files"
    assert dict(os.environ) == environment, f"{name} changed the environment"


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(texts=st.lists(TEXTS, min_size=1, max_size=3), answer=st.sampled_from(ANSWERS), chat=st.booleans())
def test_fuzz_rewards(reward_funcs, sandbox, texts: list[str], answer: str, chat: bool) -> None:
    completions = [[{"role": "assistant", "content": text}] for text in texts] if chat else texts
    for func in reward_funcs:
        check(func, completions, [answer] * len(texts), sandbox)


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_every_adversarial_completion(reward_funcs, sandbox, text: str) -> None:
    for func in reward_funcs:
        check(func, [text], ["42"], sandbox)
