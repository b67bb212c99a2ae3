"""Dynamic sampling in PODSTrainer: the prompts it trains, in data order, against a plain simulation of the rounds
(1 and 2 processes), its metrics, and a resumed run that equals the uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import char_tokenizer, run_dynamic_sampling, run_launched, scripted_rollout, two_process_launch

from pods_rl.trainer.refill import GenerationStream

SCRIPT = Path(__file__).with_name("dynamic_sampling_run.py")
# Generation batches of 2 prompts (1 process) in order: a refill runs into the epoch's end at step 3.
FLAGS = "100000001101"
# Generation batches of 4 prompts on 2 processes: process 0's always vary, process 1's mostly do not.
TWO_PROCESS_FLAGS = "11001100110111111100110011001100"


def simulate(flags: str, processes: int, groups: int, max_rounds: int, steps: int) -> list[tuple[int, list[list[int]]]]:
    """Per step: the rounds run and each process's trained prompts, by the documented rules in plain loops.
    Generation batches are `processes * groups` consecutive prompts, process p holding groups p*G..(p+1)*G-1; an
    epoch ends when fewer remain, and the next starts over."""
    size = processes * groups
    batches = [list(range(start, start + size)) for start in range(0, len(flags) - size + 1, size)]
    position, result = 0, []
    while len(result) < steps:
        position %= len(batches)
        rounds: list[list[int]] = []
        while True:
            rounds.append(batches[position])
            position += 1
            kept = [
                [i for r in rounds for i in r[p * groups : (p + 1) * groups] if flags[i] == "1"][:groups]
                for p in range(processes)
            ]
            if min(map(len, kept)) == groups or len(rounds) == max_rounds or position == len(batches):
                break
        last = rounds[-1]
        trained = [
            k + [i for i in last[p * groups : (p + 1) * groups] if flags[i] == "0"][: groups - len(k)]
            for p, k in enumerate(kept)
        ]
        result.append((len(rounds), trained))
    return result


def prompt_rows(indices: list[int], flags: str, rows_per_prompt: int) -> list[str]:
    return [("v" if flags[i] == "1" else "c") + f"{i:02d}=" for i in indices for _ in range(rows_per_prompt)]


def check_against_simulation(run: dict, expected: list, process: int, flags: str, m: int, rows: int) -> None:
    tokenizer = char_tokenizer()
    for generation, (_, trained) in zip(run["generations"], expected, strict=True):
        assert len(generation["prompts"]) == rows  # a fixed number of rows on every process
        assert generation["prompts"] == prompt_rows(trained[process], flags, m)
        # Each row's rollout, extra field and prompt come from the same round's same row.
        assert [tag // 100 for tag in generation["tags"]] == [int(p[1:3]) for p in generation["prompts"]]
        assert generation["completion_ids"] == [scripted_rollout(tokenizer, tag)[0] for tag in generation["tags"]]
        # Every trained group of a varying prompt has variance, hence nonzero advantages; a fill group has none.
        for first in range(0, rows, m):
            advantages = generation["advantages"][first : first + m]
            varies = generation["prompts"][first][0] == "v"
            assert any(a != 0 for a in advantages) == varies
    rounds = [r for r, _ in expected]
    assert run["pods/generation_rounds"] == rounds


@pytest.mark.parametrize(("m", "rows"), [(4, 8), (2, 4)], ids=["grpo-ds", "pods-ds"])
def test_trains_the_informative_prompts_in_data_order(tmp_path, m, rows):
    run = run_dynamic_sampling(
        tmp_path, FLAGS, num_selected=m, per_device_train_batch_size=rows, max_generation_rounds=3
    )
    expected = simulate(FLAGS, processes=1, groups=rows // m, max_rounds=3, steps=4)
    assert [r for r, _ in expected] == [3, 2, 1, 3]  # the case covers the round limit, a full batch and the epoch end
    check_against_simulation(run, expected, 0, FLAGS, m, rows)
    assert run["pods/prompts_generated"] == [2.0 * r for r, _ in expected]
    assert run["pods/rollouts_generated"] == [8.0 * r for r, _ in expected]
    # The completions table lists the last generation's trained rows, with the reward's log_extra column.
    assert run["table_tags"] == run["generations"][-1]["tags"]


@pytest.mark.slow
@pytest.mark.parametrize("step", [1, 3], ids=["mid-epoch", "after-a-refill-ended-the-epoch"])
def test_resumed_run_equals_the_uninterrupted_one(tmp_path, step):
    settings = dict(num_selected=2, per_device_train_batch_size=4, save_strategy="steps", save_steps=1)
    full = run_dynamic_sampling(tmp_path / "full", FLAGS, **settings)
    resumed = run_dynamic_sampling(
        tmp_path / "resumed", FLAGS, resume_from=tmp_path / "full" / f"checkpoint-{step}", **settings
    )
    assert resumed["generations"] == full["generations"][step:]
    # The log history holds the checkpoint's steps, then the resumed ones.
    assert resumed["loss"] == pytest.approx(full["loss"], rel=1e-6, abs=1e-9)
    assert resumed["pods/generation_rounds"] == full["pods/generation_rounds"]


@pytest.mark.slow
def test_two_processes_one_all_informative_one_all_equal(tmp_path):
    """Process 0's groups always vary, process 1's mostly not: both join every round (no hang) and each trains its
    fixed rows, process 1 from later rounds or the fill."""
    run_launched(two_process_launch(), SCRIPT, str(tmp_path), TWO_PROCESS_FLAGS)
    expected = simulate(TWO_PROCESS_FLAGS, processes=2, groups=2, max_rounds=3, steps=4)
    assert [r for r, _ in expected] == [3, 1, 3, 1]  # the round limit, a full batch, the epoch end
    runs = [json.loads((tmp_path / f"rank{process}.json").read_text()) for process in range(2)]
    for process, run in enumerate(runs):
        check_against_simulation(run, expected, process, TWO_PROCESS_FLAGS, m=2, rows=4)
    assert runs[0]["table_tags"] == [tag for run in runs for tag in run["generations"][-1]["tags"]]


class Copies:
    """A fake epoch iterator: generation batch b appears as R copies ("b.0", "b.1", ...), `batches` of them."""

    def __init__(self, copies: int, batches: int):
        self.items = iter(f"{b}.{c}" for b in range(batches) for c in range(copies))

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.items)


@pytest.mark.parametrize(("copies", "per_step"), [(1, 1), (2, 2), (4, 2), (6, 3)])
def test_draws_take_whole_generation_batches_and_keep_the_loop_aligned(copies, per_step):
    """Whatever the copies per generation batch and the batches per optimizer step, a draw (made while the loop
    generates from the first copy of its step) returns the next generation batch's first copy, and the loop's next
    generation starts at a first copy again. At the epoch's end a draw returns None and hands the copies it took
    back to the loop, whose steps over the last generation still get every batch."""
    stream, epoch = GenerationStream(copies), Copies(copies, batches=7)
    steps = []

    def loop_step() -> list[str]:
        steps.append(stream.take(epoch, per_step))
        return steps[-1]

    generated = []
    for refills in (2, 1, 0, 2):
        generated.append(loop_step()[0])
        generated.append([stream.draw() for _ in range(refills)])
        for _ in range(copies // per_step - 1):  # the loop's other steps over this generation's copies
            loop_step()
    assert generated == ["0.0", ["1.0", "2.0"], "3.0", ["4.0"], "5.0", [], "6.0", [None, None]]
    assert [len(batches) for batches in steps] == [per_step] * len(steps)
    assert steps[-1][-1] == f"6.{copies - 1}"  # the last generation's copies, which the failed draw had taken
    assert stream.position == 7 * copies
    assert loop_step() == []


def test_saved_position_is_where_a_resumed_stream_starts(tmp_path):
    stream, epoch = GenerationStream(2), Copies(2, batches=5)
    assert stream.take(epoch, 2) == ["0.0", "0.1"]
    assert stream.take(epoch, 0) == []  # the same iterator: still epoch 0
    assert stream.draw() == "1.0"
    stream.save(tmp_path)
    resumed = GenerationStream(2)
    assert resumed.saved_position(tmp_path) == (0, 4)
    resumed.start_at(0, 4)
    resumed.take(Copies(2, batches=5), 2)
    assert (resumed.epoch, resumed.position) == (0, 6)
    resumed.take(Copies(2, batches=5), 2)  # a new iterator: the next epoch
    assert (resumed.epoch, resumed.position) == (1, 2)
    assert GenerationStream(2).saved_position(tmp_path / "missing") is None


def test_a_position_at_the_epoch_end_resumes_at_the_next_epoch_start(tmp_path):
    """Saved after draws took an epoch's last batches, the position is the epoch's length: a resumed run starts the
    next epoch (the Trainer would otherwise skip the whole epoch and apply the position to the next one)."""
    stream, epoch = GenerationStream(1), Copies(1, batches=3)
    assert stream.take(epoch, 1) == ["0.0"]
    assert [stream.draw(), stream.draw(), stream.draw()] == ["1.0", "2.0", None]
    stream.save(tmp_path)
    resumed = GenerationStream(1)
    resumed.epoch_length = 3
    assert resumed.saved_position(tmp_path) == (1, 0)
    resumed.epoch_length = 4  # mid-epoch
    assert resumed.saved_position(tmp_path) == (0, 3)


def test_rewind_returns_to_the_failed_steps_start(tmp_path):
    stream, epoch = GenerationStream(1), Copies(1, batches=6)
    stream.take(epoch, 1)
    stream.take(epoch, 1)  # the step that fails, in a refill round
    assert stream.draw() == "2.0"
    assert (stream.epoch, stream.position) == (0, 3)
    stream.rewind()
    assert (stream.epoch, stream.position) == (0, 1)


def test_tools_are_refused_before_the_model_loads(tmp_path):
    from support import fast_args

    from pods_rl import PODSConfig, PODSTrainer

    args = PODSConfig(**fast_args(output_dir=str(tmp_path), num_generations=4, dynamic_sampling=True, max_steps=1))
    with pytest.raises(ValueError, match="dynamic_sampling supports neither tools nor environment_factory"):
        PODSTrainer(model=str(tmp_path / "no-model"), reward_funcs=len, args=args, tools=[len])
