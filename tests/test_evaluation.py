import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
import two_process_evaluation
from datasets import Dataset
from support import two_process_launch
from two_process_evaluation import EVAL_KWARGS

from pods_rl.evaluation import _shard, evaluate
from pods_rl.models.tiny import TinyRecipe, build_model, build_tokenizer


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tok = build_tokenizer()
    return build_model(TinyRecipe(hidden_size=16, intermediate_size=32, num_heads=2), tok), tok


def _dataset(n: int) -> Dataset:
    prompts = [[{"role": "user", "content": f"Compute {i}+{i}."}] for i in range(n)]
    return Dataset.from_dict({"prompt": prompts, "answer": [str(2 * i) for i in range(n)]})


def test_greedy_and_sampled_accuracy_in_range_and_mode_restored(model_and_tokenizer) -> None:
    model, tok = model_and_tokenizer
    model.train()
    result = evaluate(model, tok, _dataset(5), max_new_tokens=4, batch_size=2, num_samples=2)
    assert result["num_examples"] == 5 and result["num_samples"] == 2
    assert 0.0 <= result["accuracy"] <= 1.0 and 0.0 <= result["accuracy_sampled"] <= 1.0
    assert model.training


def test_exact_value_with_a_stub_reward(model_and_tokenizer) -> None:
    model, tok = model_and_tokenizer
    model.eval()
    seen = []

    def stub(completions, answer, **kwargs):
        seen.extend(answer)
        assert all(c[0]["role"] == "assistant" for c in completions)
        return [1.0 if int(a) % 4 == 0 else 0.0 for a in answer]

    result = evaluate(model, tok, _dataset(6), reward=stub, max_new_tokens=2, batch_size=4)
    assert result == {"num_examples": 6, "accuracy": 0.5} and seen == ["0", "2", "4", "6", "8", "10"]
    assert not model.training


def test_sampling_is_seeded(model_and_tokenizer) -> None:
    model, tok = model_and_tokenizer
    kwargs = {"max_new_tokens": 6, "greedy": False, "num_samples": 1, "reward": _first_char_is_digit}
    a = evaluate(model, tok, _dataset(8), seed=1, **kwargs)
    b = evaluate(model, tok, _dataset(8), seed=1, **kwargs)
    assert a == b and "accuracy" not in a


def _first_char_is_digit(completions, **kwargs):
    return [float(c[0]["content"][:1].isdigit()) for c in completions]


def test_nothing_to_evaluate_raises(model_and_tokenizer) -> None:
    with pytest.raises(ValueError, match="num_samples"):
        evaluate(*model_and_tokenizer, _dataset(1), greedy=False)
    assert torch.is_grad_enabled()


def test_sharded_over_two_processes_equals_one_process(tmp_path) -> None:
    script = Path(__file__).with_name("two_process_evaluation.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(script.parent), str(script.parent.parent / "src")])}
    result = subprocess.run(
        [*two_process_launch(), str(script), str(tmp_path)],
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    model, tokenizer = two_process_evaluation.model_and_tokenizer()
    seen: list[str] = []
    reward = two_process_evaluation.graded_reward(seen)
    alone = evaluate(model, tokenizer, two_process_evaluation.questions(9), reward=reward, **EVAL_KWARGS)
    # Greedy: exactly the one-process accuracy, on every process. Sampled: same count, draws of its own.
    for rank in ranks:
        assert rank["results"]["accuracy"] == alone["accuracy"]
        assert rank["results"]["num_examples"] == 9 and rank["results"]["num_samples"] == 1
    assert ranks[0]["results"] == ranks[1]["results"]
    assert 0 < alone["accuracy"] < 2  # the reward varies, so a lost or double-counted row would show
    # Each process graded its own five rows; the second one's fifth row only fills its batch and is not counted.
    per_pass = [["0", "2", "4", "6", "8"], ["10", "12", "14", "16", "0"]]
    assert [rank["seen"] for rank in ranks] == [per_pass[0] * 2, per_pass[1] * 2]  # greedy, then one sampled pass


@pytest.mark.parametrize("processes", [1, 2, 3, 4])
def test_shards_cover_every_row_once_in_equal_lengths(processes) -> None:
    for size in range(1, 11):
        data = Dataset.from_dict({"row": list(range(size))})
        shards = [_shard(data, index, processes) for index in range(processes)]
        assert len({len(part) for part, _ in shards}) == 1  # the same number of generation batches everywhere
        counted = [row for part, count in shards for row in part["row"][:count]]
        assert counted == list(range(size))


def test_progress_counts_completions_of_every_pass(model_and_tokenizer) -> None:
    model, tok = model_and_tokenizer
    calls = []
    evaluate(
        model, tok, _dataset(5), max_new_tokens=2, batch_size=2, num_samples=1, progress=lambda *a: calls.append(a)
    )
    # greedy pass over 5 rows in batches of 2, then one sampled pass: 10 completions in all
    assert calls == [(0, 10), (2, 10), (4, 10), (5, 10), (7, 10), (9, 10), (10, 10)]


class _OneRowEndsPerToken(torch.nn.Module):
    """A stand-in model whose generate ends row i of the batch (writes EOS) at decoding step i + 1, calling the
    stopping criteria after every step as transformers does."""

    device = torch.device("cpu")

    def generate(self, input_ids, attention_mask, eos_token_id, stopping_criteria, pad_token_id, **kwargs):
        ids = input_ids
        for step in range(input_ids.shape[0]):
            column = torch.full((ids.shape[0], 1), 7)
            column[step] = eos_token_id
            ids = torch.cat([ids, column], dim=1)
            assert not stopping_criteria(ids, None).any()  # progress only: it never stops a row
        return ids


def test_progress_within_one_batch_counts_rows_that_ended(model_and_tokenizer) -> None:
    _, tok = model_and_tokenizer
    calls = []
    result = evaluate(
        _OneRowEndsPerToken(), tok, _dataset(3), batch_size=3, reward=lambda completions, **_: [0.0] * 3,
        progress=lambda *a: calls.append(a),
    )  # fmt: skip
    assert result["accuracy"] == 0.0
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3), (3, 3)]
