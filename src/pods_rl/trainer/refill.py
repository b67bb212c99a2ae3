"""The training loop's position in its data, kept exact for resume, and where dynamic sampling's extra prompts
come from: the training dataloader's own epoch iterator.

The position. Every run (dynamic sampling or not) counts the batches taken from each epoch's iterator; the count
(epoch, batches taken in it) is saved with each checkpoint (`STATE_FILE`) and a resumed run starts there: the
Trainer skips exactly those batches of that epoch. The Trainer's own rule, `global_step * gradient_accumulation_steps`
batches of epoch `global_step // steps_per_epoch`, is wrong once refills drew more, and for a dataset without a
length (it never leaves epoch 0). A position at an epoch's end is the next epoch's start.

The choice. TRL generates inside `_prepare_inputs`, from the batch that the HF Trainer's loop took from its epoch
iterator (`get_batch_samples`). Extra prompts could come from a second iterator over the same sampler, but then the
loop would meet those prompts again and an epoch would no longer mean every prompt once. So they come from the
loop's own iterator: `PODSTrainer.get_batch_samples` takes each step's batches through a `GenerationStream`, which
also draws the next generation batches from it. Every pull, the loop's and ours, goes through the one iterator, so
accelerate's sharding, prefetching and worker processes see one ordinary stream.

The stream's layout. TRL's RepeatSampler yields each generation batch R = steps_per_generation * num_iterations
times in a row (one copy per micro-step; only the first is generated from). PODSConfig requires R to be a multiple
of gradient_accumulation_steps, so a generation starts at the first micro-batch of a `get_batch_samples` call and
the loop has taken k <= R copies of the current batch when the refill runs. Each draw takes the next R batches and
keeps the one at the next generation batch's first position (`step_start + R` for the first draw, R further for
each next): the R copies of every drawn batch are consumed, so the loop's next generation again starts at a
generation batch's first copy, and the copies it takes in between are ones it ignores (TRL trains from its
buffer). A draw that finds fewer than R batches left returns None and hands the batches it took back to the loop:
they are the remaining copies of generations being trained, which the loop's next steps still need. Every process
holds the same number of batches (accelerate's even_batches), so all see the end together.

The order. TRL's RepeatSampler draws each epoch's permutation from one generator, seeded once: a resumed run's
fresh sampler would give epoch e >= 1 the order of epoch 0. `EpochRepeatSampler` gives epoch e the permutation that
TRL's sampler gives its (e + 1)-th pass, as a function of (seed, e) alone, told e by `set_epoch`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from trl.trainer.utils import RepeatSampler

STATE_FILE = "pods_data_state.json"


class GenerationStream:
    """The position of the training loop in its epoch iterator, and the draws of further generation batches."""

    def __init__(self, batches_per_generation: int):
        self.batches_per_generation = batches_per_generation
        self.epoch = -1  # epochs begun; the first iterator seen is epoch 0 (or the one of `start_at`)
        self.position = 0  # batches taken for good from the current epoch's iterator, by the loop and by draws
        self.epoch_length: int | None = None  # batches in an epoch, where the dataloader has a length
        self.step_start = (0, 0)  # (epoch, position) where the loop's last step began
        self._iterator: Iterator | None = None
        self._returned: list[Any] = []  # batches a draw took at the epoch's end: the loop's, served to it first
        self._ended = False  # the current epoch's iterator ran out
        self._next_generation = 0  # position of the next generation batch's first copy
        self._start: tuple[int, int] | None = None

    def take(self, iterator: Iterator, count: int) -> list[Any]:
        """The loop's `count` batches for one optimizer step from this epoch's `iterator` (from `get_batch_samples`):
        the batches a draw handed back first, then the iterator's; fewer at the epoch's end."""
        if iterator is not self._iterator:
            self._iterator = iterator
            self.epoch, self.position = self._start if self._start is not None else (self.epoch + 1, 0)
            self._start, self._returned, self._ended = None, [], False
        self.step_start = (self.epoch, self.position)
        batches, self._returned = self._returned[:count], self._returned[count:]
        while len(batches) < count and not self._ended:
            try:
                batches.append(next(iterator))
            except StopIteration:
                self._ended = True
        if batches:  # the step generates from its first batch: the next generation batch starts R later
            self._next_generation = self.position + self.batches_per_generation
        self.position += len(batches)
        return batches

    def draw(self) -> list[Any] | None:
        """This process's rows of the next generation batch, or None when the epoch has no whole one left."""
        if self._iterator is None:
            raise RuntimeError("Dynamic sampling draws prompts only inside the training loop.")
        if self._ended:
            return None
        batches = []
        for _ in range(self.batches_per_generation):
            try:
                batches.append(next(self._iterator))
            except StopIteration:
                self._ended = True
                self._returned = batches  # copies of generations the loop is training: its batches
                return None
        first = self.position
        self.position += len(batches)
        batch = batches[self._next_generation - first]
        self._next_generation += self.batches_per_generation
        return batch

    def rewind(self) -> None:
        """Back to where the last step began (it failed before its update); the stream then only saves."""
        self.epoch, self.position = self.step_start
        self._iterator = None

    def save(self, folder: Path) -> None:
        (folder / STATE_FILE).write_text(json.dumps({"epoch": self.epoch, "position": self.position}))

    def saved_position(self, folder: Path) -> tuple[int, int] | None:
        """(epoch, batches already taken in it) saved in checkpoint `folder`, a position at the epoch's end
        (`epoch_length`, set before) read as the next epoch's start; None without a saved state (a checkpoint of an
        earlier version)."""
        path = folder / STATE_FILE
        if not path.is_file():
            return None
        state = json.loads(path.read_text())
        epoch, position = state["epoch"], state["position"]
        if self.epoch_length is not None and position >= self.epoch_length:
            epoch, position = epoch + 1, 0
        return epoch, position

    def start_at(self, epoch: int, position: int) -> None:
        """The training loop (re)starts: its next iterator is epoch `epoch`, with `position` batches skipped."""
        self._start, self._iterator = (epoch, position), None


class EpochRepeatSampler(RepeatSampler):
    """TRL's RepeatSampler whose order in epoch e depends on (seed, e) only: the permutation TRL's sampler yields
    in its (e + 1)-th pass, so an uninterrupted run trains what it trained before, and a resumed run (a fresh
    sampler, told its epoch by `set_epoch`) what the uninterrupted one trained, on every process."""

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle:
            self.generator = torch.Generator()
            if self.seed is not None:
                self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):  # the earlier passes' permutations
                torch.randperm(self.num_samples, generator=self.generator)
        return super().__iter__()
