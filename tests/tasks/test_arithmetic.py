import pytest

from pods_rl.tasks.arithmetic import demonstration, load_arithmetic, sft_dataset, solution_steps
from pods_rl.tasks.base import SYSTEM_PROMPT


def test_deterministic_from_seed_and_disjoint() -> None:
    a = load_arithmetic(seed=3, num_train=300, num_test=50)
    b = load_arithmetic(seed=3, num_train=300, num_test=50)
    c = load_arithmetic(seed=4, num_train=300, num_test=50)
    assert a.train["expression"] == b.train["expression"] and a.test["answer"] == b.test["answer"]
    assert a.train["expression"] != c.train["expression"]
    train, test = set(a.train["expression"]), set(a.test["expression"])
    assert len(train) == 300 and len(test) == 50 and not train & test
    assert a.name == "arithmetic" and len(a.reward_funcs) == len(a.reward_weights) == 3


def test_rows_are_conversational_with_integer_answers() -> None:
    task = load_arithmetic(num_train=20, num_test=5, operands=(3,), digits=2, operators="*")
    row = task.train[0]
    assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert row["prompt"][1] == {"role": "user", "content": f"Compute {row['expression']}."}
    a, b, c = (int(x) for x in row["expression"].split("*"))
    assert row["answer"] == str(a * b * c)


@pytest.mark.parametrize(
    ("expression", "steps"),
    [("3+4*2", [("4*2", 8), ("3+8", 11)]), ("2-5+1", [("2-5", -3), ("-3+1", -2)]), ("7*0", [("7*0", 0)])],
)
def test_solution_steps_follow_precedence(expression: str, steps: list) -> None:
    assert solution_steps(expression) == steps
    assert solution_steps(expression)[-1][1] == eval(expression)


def test_demonstrations_and_flawed_fraction() -> None:
    assert demonstration("3+4*2") == "<think>\n4*2=8\n3+8=11\n</think>\n<answer>\n11\n</answer>"
    assert demonstration("3+4*2", flawed=True) == "<think>\n4*2=8\n3+8=11\n</think>\n<answer>\n8\n</answer>"
    task = load_arithmetic(num_train=400, num_test=10, operands=(3,), operators="+-")
    clean = sft_dataset(task.train)
    flawed = sft_dataset(task.train, flawed_fraction=0.5, seed=1)
    answers = task.train["answer"]
    assert all(c[0]["content"].endswith(f"\n{a}\n</answer>") for c, a in zip(clean["completion"], answers, strict=True))
    short = sum(
        not c[0]["content"].endswith(f"\n{a}\n</answer>") for c, a in zip(flawed["completion"], answers, strict=True)
    )
    assert 150 < short < 250
    assert flawed["prompt"] == task.train["prompt"]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"num_train": 0}, "num_train"),
        ({"num_test": -1}, "num_test"),
        ({"operands": (1,)}, "operands"),
        ({"digits": 0}, "digits"),
        ({"operators": "/"}, "operators"),
        ({"operands": (2,), "operators": "+", "num_train": 100, "num_test": 1}, "num_train \\+ num_test"),
    ],
)
def test_bad_options_raise_naming_the_option(kwargs: dict, option: str) -> None:
    with pytest.raises(ValueError, match=option):
        load_arithmetic(**kwargs)


def test_small_space_is_filled_exactly() -> None:
    task = load_arithmetic(operands=(2,), operators="+", num_train=90, num_test=10)
    assert len(set(task.train["expression"]) | set(task.test["expression"])) == 100
