import pytest

from pods_rl.tasks import load_task
from pods_rl.tasks.arithmetic import demonstration, load_arithmetic, load_three_term_sums, sft_dataset, solution_steps
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


def test_three_term_sums_split_all_of_them_800_to_200() -> None:
    task = load_task("arithmetic-3term")
    assert task.name == "arithmetic-3term" and (len(task.train), len(task.test)) == (800, 200)
    train, test = set(task.train["expression"]), set(task.test["expression"])
    every_sum = {f"{a}+{b}+{c}" for a in range(10) for b in range(10) for c in range(10)}
    assert len(train) == 800 and len(test) == 200 and not train & test and train | test == every_sum
    for split in (task.train, task.test):
        for expression, answer in zip(split["expression"], split["answer"], strict=True):
            assert answer == str(sum(int(term) for term in expression.split("+")))
    assert task.test[0]["prompt"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Compute {task.test[0]['expression']}."},
    ]
    assert task.reward_funcs == load_arithmetic().reward_funcs and task.reward_weights == [1.0, 1.0, 1.0]


def test_three_term_sums_are_deterministic_and_sized_by_the_options() -> None:
    default = load_three_term_sums()
    assert load_three_term_sums().test["expression"] == default.test["expression"]
    # The same questions as the arithmetic task with these options: the name only fixes them.
    same = load_arithmetic(operands=(3,), digits=1, operators="+", num_train=800, num_test=200)
    assert same.test["expression"] == default.test["expression"] and same.train["answer"] == default.train["answer"]
    other = load_three_term_sums(seed=1, num_train=100, num_test=50, system_prompt="Add.")
    assert (len(other.train), len(other.test)) == (100, 50)
    assert other.test["expression"] != default.test["expression"][:50]
    assert {p[0]["content"] for p in other.train["prompt"]} == {"Add."}
    with pytest.raises(ValueError, match="exceeds the 1000 distinct expressions"):
        load_three_term_sums(num_train=900, num_test=200)
