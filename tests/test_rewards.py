"""Reward functions: exact values on a table of completions, both completion formats, and a fuzz test."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pods_rl import rewards

GOOD = "<think>\n3 + 4 = 7\n</think>\n<answer>\n7\n</answer>"


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        (GOOD, "7", 1.0),
        (GOOD, "8", 0.0),
        ("<answer>3/4</answer>", "0.75", 1.0),
        ("<answer>\\frac{3}{4}</answer>", "0.75", 1.0),
        ("<answer>0.75</answer>", "\\frac{3}{4}", 1.0),
        ("<answer>1,234</answer>", "1234", 1.0),
        ("<answer>$1,234.00</answer>", "1234", 1.0),
        ("<answer>The answer is 42 apples.</answer>", "42", 1.0),
        ("<answer>x = 2\\sqrt{2}</answer>", "2\\sqrt{2}", 1.0),
        ("<answer>\\{1, 2\\}</answer>", "\\{1,2\\}", 1.0),
        ("<answer>(1,-1)</answer>", "(1,-1)", 1.0),
        ("no tags, but \\boxed{\\frac{1}{2}} at the end", "0.5", 1.0),
        ("no tags or box: 3 then 4 then 12", "12", 1.0),
        ("no tags or box: 12 then 4", "12", 0.0),
        ("<answer>5</answer> but later \\boxed{6}", "5", 1.0),
        ("<answer></answer> and \\boxed{6}", "6", 1.0),
        ("", "7", 0.0),
        ("no answer at all", "7", 0.0),
        ("<answer>9^{9^{9^9}}</answer>", "7", 0.0),
    ],
)
def test_accuracy(completion: str, answer: str, expected: float) -> None:
    assert rewards.accuracy([completion], [answer]) == [expected]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (GOOD, 0.1),
        ("<think>a</think><answer>b</answer>", 0.1),
        ("  \n<think>a</think>\n\n<answer>b</answer>\n", 0.1),
        ("Sure!<think>a</think><answer>b</answer>", 0.095),
        ("<think>a</think><answer>b</answer> Done.", 0.094),
        ("x" * 50 + "<think>a</think><answer>b</answer>" + "y" * 30, 0.02),
        ("x" * 200 + "<think>a</think><answer>b</answer>", 0.0),
        ("<think>a</think> words <answer>b</answer>", 0.0),
        ("<answer>b</answer><think>a</think>", 0.0),
        ("<think>a</think>", 0.0),
        ("<think>a<answer>b</answer>", 0.0),
        ("<answer>7</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_format(completion: str, expected: float) -> None:
    assert rewards.format([completion], answer=["7"]) == [expected]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (GOOD, 0.1),
        ("<think>a</think>", 0.05),
        ("<answer>7</answer>", 0.05),
        ("<think>a</think><answer>7", 0.075),
        ("</think><think><answer>7</answer>", 0.05),
        ("<answer>7</answer><think>a</think>", 0.0),
        ("<think><think>a</think><answer>7</answer>", 0.075),
        ("<think>a</think><answer>7</answer><answer>8</answer>", 0.05),
        ("no tags", 0.0),
        ("", 0.0),
    ],
)
def test_tags(completion: str, expected: float) -> None:
    assert rewards.tags([completion], answer=["7"]) == [expected]


def test_conversational_and_plain_completions_score_alike() -> None:
    plain = [GOOD, "Sure!<think>a</think><answer>8</answer>"]
    chat = [[{"role": "assistant", "content": text}] for text in plain]
    for func, expected in [(rewards.accuracy, [1.0, 0.0]), (rewards.format, [0.1, 0.095]), (rewards.tags, [0.1, 0.1])]:
        assert func(plain, answer=["7", "7"]) == expected
        assert func(chat, answer=["7", "7"]) == expected


def test_default_weights_reproduce_the_paper_reward() -> None:
    assert [f.__name__ for f in rewards.REWARD_FUNCS] == ["accuracy", "format", "tags"]
    assert rewards.REWARD_WEIGHTS == [1.0, 1.0, 1.0]
    weighted = zip(rewards.REWARD_FUNCS, rewards.REWARD_WEIGHTS, strict=True)
    assert sum(w * f([GOOD], answer=["7"])[0] for f, w in weighted) == pytest.approx(1.2)


_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "}", "{", "^", "9", "1,234", " "]),
        max_size=40,
    ).map("".join),
)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXT, min_size=1, max_size=4), chat=st.booleans())
def test_fuzz_every_reward_returns_floats_quickly(texts: list[str], chat: bool) -> None:
    completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    answers = ["42"] * len(texts)
    for func in rewards.REWARD_FUNCS:
        start = time.monotonic()
        scores = func(completions, answer=answers)
        assert time.monotonic() - start < 2.0 * len(texts)
        assert len(scores) == len(texts)
        assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
