"""Evaluation on a vLLM engine equals evaluation with HF generate on the same weights (needs vLLM: `make test`
runs it in .venv-vllm).

The engine here runs in float32, like the HF model, and then every greedy completion is identical, so the
accuracy is too (tolerance 0): the prompts, the EOS stop, the token limit, the decoding and the grading are the
same. A run's engine (built by TRL with vLLM's `dtype="auto"`) runs a float32 checkpoint in bf16 on a CPU; there a
greedy completion changes where the top two logits are closer than bf16's rounding (on this random model, 40 of
64 completions of 24 tokens), so its accuracy can differ from HF generate's by the questions where that happens.
"""

import pytest
import torch
from datasets import Dataset

from pods_rl.evaluation import evaluate
from pods_rl.models.tiny import VLLM_RECIPE, build_model, build_tokenizer
from pods_rl.tasks import load_task
from pods_rl.trainer.vllm_cpu import prepare_cpu_engine

TOKENS = 24


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """The tiny vLLM variant's shape with random weights peaked enough (std 0.5) that completions differ per prompt."""
    tokenizer = build_tokenizer()
    model = build_model(VLLM_RECIPE, tokenizer)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim == 2:
                parameter.normal_(0.0, 0.5)
    path = tmp_path_factory.mktemp("tiny-vllm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, tokenizer, path


@pytest.fixture(scope="module")
def engine(weights):
    from vllm import LLM

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process, as in a colocated run
        prepare_cpu_engine()
        yield LLM(model=str(weights[2]), dtype="float32", enforce_eager=True, max_model_len=256, seed=0)


def _recording(seen: list[str]):
    """Exact-match grading against the dataset's `reference` column, recording every completion."""

    def reward(completions, reference, **kwargs):
        texts = [c[0]["content"] for c in completions]
        seen.extend(texts)
        return [float(text == wanted) for text, wanted in zip(texts, reference, strict=True)]

    return reward


def test_greedy_accuracy_and_completions_equal_hf_generate(weights, engine) -> None:
    model, tokenizer, _ = weights
    prompts = load_task("arithmetic", num_test=64).test["prompt"]
    hf_completions: list[str] = []
    unscored = Dataset.from_dict({"prompt": prompts, "reference": [""] * len(prompts)})
    evaluate(model, tokenizer, unscored, reward=_recording(hf_completions), max_new_tokens=TOKENS)
    assert len(set(hf_completions)) > 32  # a model whose completions tell prompts apart
    # References: HF's own completion for even rows, one no completion equals for odd rows: HF scores 0.5 exactly.
    references = [text if index % 2 == 0 else "\x00" for index, text in enumerate(hf_completions)]
    dataset = Dataset.from_dict({"prompt": prompts, "reference": references})
    results = {}
    completions = {"hf": [], "vllm": []}
    for backend, on in (("hf", None), ("vllm", engine)):
        reward = _recording(completions[backend])
        results[backend] = evaluate(
            model, tokenizer, dataset, reward=reward, max_new_tokens=TOKENS, batch_size=20, engine=on
        )
    assert results["hf"] == {"num_examples": 64, "accuracy": 0.5}
    assert results["vllm"] == results["hf"]
    assert completions["vllm"] == completions["hf"]


def test_sampled_accuracy_on_the_engine_is_seeded(weights, engine) -> None:
    model, tokenizer, _ = weights
    dataset = Dataset.from_dict({"prompt": load_task("arithmetic", num_test=16).test["prompt"]})

    def first_char_is_digit(completions, **kwargs):
        return [float(c[0]["content"][:1].isdigit()) for c in completions]

    kwargs = {"greedy": False, "num_samples": 2, "max_new_tokens": 4, "reward": first_char_is_digit, "engine": engine}
    first = evaluate(model, tokenizer, dataset, seed=3, **kwargs)
    assert first == evaluate(model, tokenizer, dataset, seed=3, **kwargs)
    assert first["num_samples"] == 2 and 0.0 <= first["accuracy_sampled"] <= 1.0
