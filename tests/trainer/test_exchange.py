"""The row plan on one process (the exchange itself runs in test_multi_process.py on 2 and 4 processes)."""

import math

import torch

from pods_rl.trainer.exchange import _decode_row, _encode_row, owners, rows_to_move, take_rows


def test_rows_to_move_counts_rows_trained_away_from_their_process():
    # 2 processes, 6 rows generated each; process 0 trains rows 0, 3, 7, process 1 rows 8, 9, 11.
    plan = torch.tensor([[0, 3, 7], [8, 9, 11]])
    assert owners(plan, 6).tolist() == [[0, 0, 1], [1, 1, 1]]
    assert rows_to_move(plan, 6) == 1
    assert rows_to_move(torch.tensor([[0, 5], [6, 11]]), 6) == 0


def test_take_rows_on_one_process_keeps_the_plan_order_and_absent_columns():
    columns = {"completion_ids": [[i, i] for i in range(4)], "logprobs": None, "completion": list("abcd")}
    rows = take_rows(columns, torch.tensor([[1, 3]]), 4, 0, torch.device("cpu"))
    assert rows == {"completion_ids": [[1, 1], [3, 3]], "logprobs": None, "completion": ["b", "d"]}


def test_a_row_survives_packing():
    """What travels for one row: int32 ids and masks, float32 log-probs (None as NaN), the rest pickled."""
    columns = {
        "prompt_ids": [[1, 2], [3, 4, 5]],
        "completion_ids": [[6], [70000, 8]],
        "tool_mask": None,
        "logprobs": [[-0.5], [-0.25, None]],
        "completion": ["x", [{"role": "assistant", "content": "y"}]],
        "input": [{"prompt": "p"}, {"prompt": "q", "answer": 3}],
    }
    lengths, data = _encode_row(columns, 1)
    row = _decode_row(lengths, data)
    logprobs = row.pop("logprobs")
    assert logprobs[0] == -0.25 and math.isnan(logprobs[1])
    assert row == {
        "prompt_ids": [3, 4, 5],
        "completion_ids": [70000, 8],
        "tool_mask": None,
        "completion": [{"role": "assistant", "content": "y"}],
        "input": {"prompt": "q", "answer": 3},
    }
