"""Where dynamic sampling's extra prompts come from: the training dataloader's own epoch iterator, kept exact.

The choice. TRL generates inside `_prepare_inputs`, from the batch that the HF Trainer's loop took from its epoch
iterator (`get_batch_samples`). Extra prompts could come from a second iterator over the same sampler, but then the
loop would meet those prompts again and an epoch would no longer mean every prompt once. So they come from the
loop's own iterator: `PODSTrainer.get_batch_samples` hands each epoch's iterator to a `GenerationStream`, which
draws the next generation batches from it. Every pull, the loop's and ours, goes through the one iterator, so
accelerate's sharding, prefetching and worker processes see one ordinary stream.

The stream's layout. TRL's RepeatSampler yields each generation batch R = steps_per_generation * num_iterations
times in a row (one copy per micro-step; only the first is generated from). PODSConfig requires R to be a multiple
of gradient_accumulation_steps, so a generation starts at the first micro-batch of a `get_batch_samples` call and
the loop has taken k <= R copies of the current batch when the refill runs. Each draw takes the next R batches and
keeps the one at the next generation batch's first position (`step_start + R` for the first draw, R further for
each next): the R copies of every drawn batch are consumed, so the loop's next generation again starts at a
generation batch's first copy, and the copies it takes in between are ones it ignores (TRL trains from its
buffer). A draw that finds the epoch ended returns None; the loop then sees an empty iterator and starts the next
epoch. Every process holds the same number of batches (accelerate's even_batches), so all see the end together.

Resume. The HF Trainer skips `global_step * gradient_accumulation_steps` batches of the resumed epoch, which is
wrong once refills drew more. The stream's position (epoch, batches taken in it by anyone) is saved with each
checkpoint (`STATE_FILE`), and on resume the Trainer is told that position instead, so it skips exactly the
batches the interrupted run had consumed and its update loop still ends where the epoch's batches run out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_FILE = "pods_data_state.json"


class GenerationStream:
    """The position of the training loop in its epoch iterator, and the draws of further generation batches."""

    def __init__(self, batches_per_generation: int):
        self.batches_per_generation = batches_per_generation
        self.epoch = -1  # epochs begun; the first iterator seen is epoch 0 (or the resumed one)
        self.position = 0  # batches taken from the current epoch's iterator, by the loop and by draws
        self._iterator: Iterator | None = None
        self._next_generation = 0  # position of the next generation batch's first copy
        self._resume: tuple[int, int] | None = None

    def taken(self, iterator: Iterator, count: int) -> None:
        """The loop took `count` batches from `iterator` for one optimizer step (from `get_batch_samples`)."""
        if iterator is not self._iterator:
            self._iterator = iterator
            self.epoch, self.position = self._resume if self._resume is not None else (self.epoch + 1, 0)
            self._resume = None
        if count:  # the step generates from its first batch: the next generation batch starts R later
            self._next_generation = self.position + self.batches_per_generation
        self.position += count

    def draw(self) -> list[Any] | None:
        """This process's rows of the next generation batch, or None when the epoch has no batch left."""
        if self._iterator is None:
            raise RuntimeError("Dynamic sampling draws prompts only inside the training loop.")
        batches = []
        for _ in range(self.batches_per_generation):
            try:
                batches.append(next(self._iterator))
            except StopIteration:
                break
        first = self.position
        self.position += len(batches)
        if len(batches) < self.batches_per_generation:
            return None
        batch = batches[self._next_generation - first]
        self._next_generation += self.batches_per_generation
        return batch

    def save(self, folder: Path) -> None:
        (folder / STATE_FILE).write_text(json.dumps({"epoch": self.epoch, "position": self.position}))

    def resume(self, folder: Path) -> tuple[int, int] | None:
        """(epoch, batches already taken in it) saved in checkpoint `folder`, now the stream's start; None without
        a saved state (a checkpoint written without dynamic sampling)."""
        path = folder / STATE_FILE
        if not path.is_file():
            return None
        state = json.loads(path.read_text())
        self._resume = state["epoch"], state["position"]
        return self._resume
