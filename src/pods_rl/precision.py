"""The precision a run trains and generates in, and why: bf16 where the processor accelerates it and it was measured
faster for the run's model and shape, fp32 elsewhere.

On a GPU nothing changes: bf16 where the GPU supports it (TRL's default). On a CPU, bf16 pays only with bf16
instructions (AMX-BF16 or AVX512-BF16: an Intel Xeon with AMX ran a 2048-cube matrix product about 7.5x faster in
bf16, a SmolLM2-shaped forward and backward 2.3x); without them (an AVX2 EPYC) torch emulates bf16, slower than fp32,
so such a CPU stays in fp32 without measuring. Where the instructions exist, whether bf16 pays for a given model
depends on its shape (a tiny model's small matrices cost more in casts than they gain), so `pods train` measures
both precisions on the run's own model and shape at start-up (`pods_rl.run.step_costs`, a few seconds, cached per
machine and all else it depends on) and takes bf16 only when its step is at least `MARGIN` faster. A measurement beats a
table of measured cases here: a table cannot hold every model, CPU and shape, and a wrong entry would stay wrong; the
margin and the measurement's interleaving (fp32 and bf16 alternate, the fastest of each counts) keep a busy machine
from flipping the choice, though not an oversubscribed one (docs/performance.md): runs that must match force one.

bf16 here is what transformers' Trainer does with `bf16=True` on a CPU: the weights, gradients and optimizer stay
fp32 and each forward runs under `torch.autocast("cpu", dtype=torch.bfloat16)` (accelerate wraps the model's
forward). TRL's log-probabilities then come from bf16 logits reduced in fp32 (its chunked log-softmax keeps fp32
running sums). HF `generate` runs under the same autocast (`PODSTrainer` holds one autocast over the whole call, so
each weight is cast once per call, not once per token), but it computes the policy another way (a token at a time
over its KV cache, where the training forward takes the whole sequence at once), and in bf16 the two round apart: a
sampled token's log-prob differs between them by 2.6e-4 on average and up to 9.4e-2 on the tiny model, against
1.1e-5 at most in fp32 (docs/performance.md, "The sampler and the trainer"). Nothing corrects that with HF
`generate`: TRL keeps no log-probabilities of the sampler there, and its importance ratio compares the training
forward with itself (exactly 1 with one update per generation, the default), so the loss is the policy gradient of
the training forward's policy on rollouts drawn from the sampler's. With vLLM (bf16 on a CPU, whatever the training
precision) TRL's importance-sampling correction, which PODSConfig keeps on, weighs each trained row by the ratio of
the two policies. Held-out evaluation runs in fp32 whatever the training precision (`full_precision`), so accuracies
compare across precisions and machines. `trainer.bf16` set by the user forces either; forced onto a CPU without bf16
instructions, the plan warns that torch emulates it there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pods_rl.machine import instruction_set

# The flags of /proc/cpuinfo that give a CPU fast bf16 matrix products, with their names, best first.
BF16_INSTRUCTIONS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"))
# bf16 must make a step at least this much faster to be chosen: below it the gain is within what a busy machine moves
# a short measurement by, and fp32 is the safer default.
MARGIN = 1.10
FORCE_BF16 = "--set trainer.bf16=true forces bf16"
FORCE_FP32 = "--set trainer.bf16=false forces fp32"


def bf16_instructions(flags: Collection[str]) -> str | None:
    """The bf16 matrix instructions of a CPU with these flags ("AMX-BF16", "AVX512-BF16"), or None."""
    return next((name for flag, name in BF16_INSTRUCTIONS if flag in flags), None)


@dataclass(frozen=True)
class Precision:
    """A run's precision: bf16 (autocast over fp32 weights) or fp32, the reason, and the measured step seconds
    ({"fp32": s, "bf16": s}) when a measurement decided."""

    bf16: bool
    reason: str
    step_seconds: dict[str, float] | None = None
    on_cpu: bool = True

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    def describe(self) -> str:
        """The plan's words, e.g. 'bf16 autocast over fp32 weights (AVX512-BF16 CPU: ...)'."""
        what = "bf16 autocast over fp32 weights" if self.bf16 and self.on_cpu else self.name
        return f"{what} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.name, "reason": self.reason, "step_seconds": self.step_seconds}


def choose_precision(
    *,
    forced: bool | None,
    accelerator_bf16: bool | None,
    flags: Collection[str],
    step_seconds: dict[str, float] | None = None,
    processes: int = 1,
) -> Precision | None:
    """The run's precision, or None while it takes a measurement (`step_seconds` of both precisions) to decide.

    `forced`: the user's `trainer.bf16` (None: not set). `accelerator_bf16`: on a GPU (or other accelerator), whether
    it supports bf16; None on a CPU-only machine. `flags`: the CPU's /proc/cpuinfo flags. `processes`: a run of
    several processes does not measure (they would measure one another's load); it takes fp32 unless measured before.
    """
    on_cpu = accelerator_bf16 is None
    if forced is not None:
        return Precision(forced, f"trainer.bf16={str(forced).lower()}", step_seconds, on_cpu)
    if not on_cpu:
        reason = "the accelerator's default" if accelerator_bf16 else "the accelerator has no bf16"
        return Precision(bool(accelerator_bf16), reason, on_cpu=False)
    instructions = bf16_instructions(flags)
    if instructions is None:
        kind = instruction_set(frozenset(flags))
        return Precision(False, f"{kind} CPU without bf16 instructions (AMX-BF16, AVX512-BF16); {FORCE_BF16}")
    if step_seconds is None or not {"fp32", "bf16"} <= step_seconds.keys():
        if processes > 1:
            return Precision(
                False, f"{instructions} CPU, {processes} processes: measured only in a single-process run; {FORCE_BF16}"
            )
        return None
    fp32, bf16 = step_seconds["fp32"], step_seconds["bf16"]
    speedup = fp32 / bf16
    measured = f"a step measured {fp32:.2f} s in fp32, {bf16:.2f} s in bf16 for this model and shape"
    if speedup >= MARGIN:
        return Precision(True, f"{instructions} CPU: {measured}, {speedup:.2f}x; {FORCE_FP32}", step_seconds)
    return Precision(
        False, f"{instructions} CPU, but {measured}, {speedup:.2f}x (< {MARGIN:.2f}x); {FORCE_BF16}", step_seconds
    )


@contextmanager
def full_precision(model: Any) -> Iterator[None]:
    """Run `model`'s forward without the bf16 autocast that accelerate wraps it in for a bf16 run (its weights are
    fp32: only the computation changes); a model without that wrapper is left as it is."""
    original = getattr(model, "_original_forward", None)
    if original is None or "forward" not in vars(model):
        yield
        return
    wrapped = model.forward
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped
