"""Grading: answer extraction, equivalence, and safety and speed on adversarial model output."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pods_rl import grading, rewards


@pytest.fixture(scope="module", autouse=True)
def warm_worker() -> None:
    """Start the worker once, so that timings below measure grading, not the process start."""
    assert grading.grade("\\frac{1}{2}", "0.5")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>2</think><answer> 42 </answer>", "42"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),
        ("<answer>   </answer> 7", "7"),
        ("<answer>3 and no closing tag", "3"),
        ("so \\boxed{\\frac{1}{2}} and \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\fbox{5}", "5"),
        ("\\boxed 5$", "5"),
        ("\\boxed{unclosed", None),
        ("costs 1,234.5 or -3", "-3"),
        ("total: 1,234,567", "1,234,567"),
        ("no numbers", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert grading.extract_answer(text) == expected


@pytest.mark.parametrize(
    ("predicted", "gold", "expected"),
    [
        ("42", "42", True),
        ("42.0", "42", True),
        ("$42", "42", True),
        ("42.", "42", True),
        ("1,234", "1234", True),
        ("1234", "1,234", True),
        ("-7", "7", False),
        ("3/4", "0.75", True),
        ("\\frac{3}{4}", "0.75", True),
        ("\\dfrac{3}{4}", "\\frac{3}{4}", True),
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("x = 5", "5", True),
        ("5", "6", False),
        ("\\frac{1}{3}", "0.33", False),
        ("", "1", False),
        ("1", "", False),
    ],
)
def test_grade(predicted: str, gold: str, expected: bool) -> None:
    assert grading.grade(predicted, gold) is expected


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        ("42", True),
        ("x**2/2 + sin(x) + C", True),
        ("[['a', 'b'], ['c', 'd']]", True),
        ("(P ∧ Q) → (R)", True),
        ("open('/tmp/x', 'w')", False),
        ("__import__('os')", False),
        ("().__class__", False),
        ("ｏｐｅｎ('x')", False),
        ("(lambda: 1)()", False),
        ("[open][0]('x')", False),
        ("'abc'.join('x')", False),
        ("math.exp(1)", False),
        ("(open #+\n ('x'))", False),
        ("open \\\n ('x')", False),
        ("2(3)", False),
    ],
)
def test_is_safe_for_eval(text: str, safe: bool) -> None:
    assert grading.is_safe_for_eval(text) is safe


ADVERSARIAL = {
    "power tower": "<answer>9^{9^{9^9}}</answer>",
    "python power tower": "<answer>9**9**9**9</answer>",
    "chained powers": "<answer>10^10^10</answer>",
    "huge exponent": "<answer>2^{123456789}</answer>",
    "huge factorial": "<answer>123456789!</answer>",
    "nested braces": "<answer>" + "{" * 100_000 + "1" + "}" * 100_000 + "</answer>",
    "nested boxed": "\\boxed{" * 100_000 + "1" + "}" * 100_000,
    "megabyte of text": "<think>" + "x" * 1_000_000 + "</think><answer>" + "9" * 1_000_000 + "</answer>",
    "megabyte of numbers": "1,2 " * 250_000,
    "megabyte of tags": "<think><answer>" * 70_000,
    "slow symbolic": "<answer>2^{2^{100}} + x</answer>",
}


@pytest.mark.parametrize("completion", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_adversarial_completion_scores_zero_quickly(completion: str) -> None:
    start = time.monotonic()
    assert rewards.accuracy([completion], ["7"]) == [0.0]
    assert time.monotonic() - start < 2.0


def test_worker_recovers_after_a_timeout() -> None:
    assert not grading.grade("2^{2^{100}} + x", "1")  # overruns: the worker is killed and replaced
    start = time.monotonic()
    assert grading.grade("\\frac{6}{8}", "0.75")
    assert time.monotonic() - start < 30


def test_grading_is_thread_safe() -> None:
    cases = [("\\frac{3}{4}", "0.75", True), ("\\sqrt{4}", "2", True), ("\\frac{1}{3}", "0.3", False)] * 8
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda case: grading.grade(case[0], case[1]), cases))
    assert results == [expected for _, _, expected in cases]
