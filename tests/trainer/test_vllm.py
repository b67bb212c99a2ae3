"""PODSTrainer with vLLM generation (colocate mode, on this CPU): one engine for the whole module.

The tests run in order on one trainer: the engine start is the expensive part (make test-vllm runs them).
"""

import inspect

import pytest
import torch
from support import char_tokenizer, fast_args, make_trainer, prompt_dataset, vowel_reward
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOTrainer
from trl.generation import vllm_generation
from trl.generation.vllm_generation import VLLMGeneration
from vllm import SamplingParams
from vllm.config import SchedulerConfig
from vllm.platforms import current_platform

from pods_rl import PODSConfig, PODSTrainer
from pods_rl.trainer.vllm import engine_max_num_seqs, evaluation_engine

N, M, PROMPTS = 8, 2, 2
CLIP = 1e6  # so that the importance ratio is the raw exp(policy - vLLM)
# vLLM's CPU engine runs the fp32 checkpoint in bf16. Its own log-probs of a row (sampled vs re-scored) agree to a
# few percent; against the fp32 policy, single tokens can be 0.2 off, and the mean gap over a completion stays < 0.1.
BF16 = {"atol": 0.05, "rtol": 0.05}
BF16_GAP = 0.1


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("vllm")
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 32: the least vLLM's CPU attention accepts
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.5,  # peaked next-token distributions, so a row's log-probs identify it
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    model_dir = tmp_path / "model"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    args = PODSConfig(
        **fast_args(
            output_dir=str(tmp_path / "run"),
            num_generations=N,
            num_selected=M,
            per_device_train_batch_size=PROMPTS * M,
            max_steps=1,
            learning_rate=5e-3,  # moves the log-probs by about 1: well past bf16's error, not off the scale
            use_vllm=True,
            vllm_mode="colocate",
            vllm_max_model_length=32,
            vllm_importance_sampling_mode="token_truncate",
            vllm_importance_sampling_clip_max=CLIP,
            disable_tqdm=True,  # as `pods train` runs it
        )
    )
    return PODSTrainer(
        model=str(model_dir),
        reward_funcs=vowel_reward,
        args=args,
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
    )


def test_trl_contract():
    init = inspect.getsource(GRPOTrainer.__init__)
    assert "self.vllm_generation = VLLMGeneration(" in init
    assert "driver_worker.model_runner.model.load_weights" in inspect.getsource(VLLMGeneration.sync_weights)
    engine_start = inspect.getsource(VLLMGeneration._init_vllm)
    assert "self.llm = LLM(" in engine_start and "enforce_eager" not in engine_start
    # The engine's token budget per step is fixed in the call (no setting reaches it); PODS reads it there.
    assert "max_num_batched_tokens=4096," in engine_start
    assert "use_tqdm_on_load" not in engine_start
    assert "if self.state.global_step != self._last_loaded_step:" in inspect.getsource(
        GRPOTrainer._generate_single_turn
    )


def test_engine_batch_is_the_pool_and_eager(trainer):
    config = trainer.vllm_generation.llm.llm_engine.vllm_config
    # TRL would size it to the trained rows (PROMPTS * M = 4): the pool would be decoded in n/m = 4 waves.
    assert config.scheduler_config.max_num_seqs == PROMPTS * N
    assert config.model_config.enforce_eager  # on a CPU: no inductor compile inside the first training step
    assert not config.load_config.use_tqdm_on_load  # no weight-loading bars, as the trainer's (disable_tqdm)


def test_engine_batch_is_the_pool_up_to_the_engines_token_budget():
    assert engine_max_num_seqs(pool_rows=16, max_num_batched_tokens=4096) == 16
    assert engine_max_num_seqs(pool_rows=8192, max_num_batched_tokens=4096) == 4096


def test_a_pool_above_the_token_budget_gets_an_engine_vllm_accepts(tmp_path, monkeypatch):
    """A local pool of 16 x 32 x 64 / 4 = 8192 rows: TRL passes max_num_batched_tokens=4096, and vLLM refuses
    max_num_seqs above it, so the engine decodes the pool in two waves of 4096. No engine starts: the arguments
    of TRL's LLM(...) call are captured and checked by vLLM's own scheduler config."""
    engine_arguments = {}

    def capture(**kwargs):
        engine_arguments.update(kwargs)
        raise InterruptedError

    monkeypatch.setattr(vllm_generation, "LLM", capture)
    pool = dict(per_device_train_batch_size=16, gradient_accumulation_steps=32, num_generations=64, num_selected=4)
    with pytest.raises(InterruptedError):
        make_trainer(tmp_path, use_vllm=True, vllm_mode="colocate", vllm_max_model_length=32, **pool)
    assert engine_arguments["max_num_batched_tokens"] == 4096
    assert engine_arguments["max_num_seqs"] == 4096
    assert engine_arguments.get("enforce_eager", False) == current_platform.is_cpu()
    SchedulerConfig(
        max_model_len=32,
        is_encoder_decoder=False,
        max_num_batched_tokens=engine_arguments["max_num_batched_tokens"],
        max_num_seqs=engine_arguments["max_num_seqs"],
    )


def test_trained_rows_carry_their_own_vllm_logprobs(trainer):
    inputs = next(iter(trainer.get_train_dataloader()))
    assert len(inputs) == PROMPTS * N
    trainer.model.train()
    output = trainer._generate_and_score_completions(inputs)
    metrics = trainer._metrics["train"]
    assert metrics["pods/rollouts_generated"][-1] == PROMPTS * N
    assert metrics["pods/rollouts_trained"][-1] == PROMPTS * M
    assert len(output["completion_ids"]) == PROMPTS * M

    mask = output["completion_mask"].bool()
    sampling = output["sampling_per_token_logps"]
    policy = _policy_logps(trainer.model, output)
    torch.testing.assert_close(output["old_per_token_logps"][mask], policy[mask], atol=1e-4, rtol=0)
    ratio = output["importance_sampling_ratio"]
    torch.testing.assert_close(ratio[mask], torch.exp(policy - sampling)[mask], atol=1e-4, rtol=1e-4)

    # The sampling log-probs of each trained row are vLLM's for that row's own completion...
    rescored = _vllm_logps(trainer, output)
    torch.testing.assert_close(sampling[mask], rescored[mask], **BF16)
    # ...which another row's would not be (so the check above can tell rows apart).
    both = mask & mask.roll(1, dims=0)
    assert not torch.allclose(sampling.roll(1, dims=0)[both], rescored[both], **BF16)


def test_weights_reach_vllm_after_each_update(trainer):
    probe = next(iter(trainer.get_train_dataloader()))[:1]
    fixed = _fixed_completion(trainer, probe)
    before_vllm = _vllm_logps(trainer, fixed)
    before_policy = _policy_logps(trainer.model, fixed)
    assert _gap(before_vllm, before_policy) < BF16_GAP

    trainer.train()  # one optimizer step
    after_policy = _policy_logps(trainer.model, fixed)
    stale = _gap(before_vllm, after_policy)
    assert stale > 4 * BF16_GAP  # the update moved the policy well past bf16's error
    trainer._generate([row["prompt"] for row in probe])  # the next generation syncs the weights first
    assert _gap(_vllm_logps(trainer, fixed), after_policy) < BF16_GAP


def test_evaluation_engine_holds_the_weights_of_the_step_it_evaluates(trainer):
    """After a step's update (simulated here by moving the LM head) the engine is one update behind until
    `evaluation_engine` syncs it, as the run's evaluation does before generating."""
    probe = next(iter(trainer.get_train_dataloader()))[:1]
    fixed = _fixed_completion(trainer, probe)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        head = trainer.model.lm_head.weight
        head.add_(0.5 * torch.randn(head.shape, generator=generator))
    trainer.state.global_step += 1
    assert _gap(_vllm_logps(trainer, fixed), _policy_logps(trainer.model, fixed)) > 4 * BF16_GAP
    assert evaluation_engine(trainer) is trainer.vllm_generation.llm
    assert _gap(_vllm_logps(trainer, fixed), _policy_logps(trainer.model, fixed)) < BF16_GAP
    assert trainer._last_loaded_step == trainer.state.global_step  # the next generation does not sync again


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean absolute difference of two rows of per-token log-probs."""
    return (a - b).abs().mean().item()


@torch.no_grad()
def _fixed_completion(trainer, rows) -> dict:
    """The policy's greedy completion: likely tokens, whose log-probs bf16 rounds least."""
    prompt = torch.tensor([trainer.processing_class(rows[0]["prompt"])["input_ids"]])
    generated = trainer.model.generate(prompt, do_sample=False, max_new_tokens=8, min_new_tokens=8)
    completion = generated[:, prompt.shape[1] :]
    return {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": torch.ones_like(completion),
    }


@torch.no_grad()
def _policy_logps(model, batch: dict) -> torch.Tensor:
    """Per-token log-probs of each row's completion under the training model, computed here from scratch."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, batch["prompt_ids"].shape[1] - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def _vllm_logps(trainer, batch: dict) -> torch.Tensor:
    """Per-token log-probs of each row's completion under vLLM's weights, by scoring prompt + completion."""
    rows = []
    for prompt, prompt_mask, completion, completion_mask in zip(
        batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"], strict=True
    ):
        rows.append((prompt[prompt_mask.bool()].tolist(), completion[completion_mask.bool()].tolist()))
    outputs = trainer.vllm_generation.llm.generate(
        [{"prompt_token_ids": prompt + completion} for prompt, completion in rows],
        SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0),
        use_tqdm=False,
    )
    logps = torch.zeros(batch["completion_ids"].shape)
    for i, ((prompt, completion), output) in enumerate(zip(rows, outputs, strict=True)):
        scored = output.prompt_logprobs[len(prompt) :]
        logps[i, : len(completion)] = torch.tensor(
            [position[token].logprob for position, token in zip(scored, completion, strict=True)]
        )
    return logps


def test_sleep_mode_on_a_cpu_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    import pods_rl.trainer.trainer

    monkeypatch.setattr(pods_rl.trainer.trainer.GRPOTrainer, "__init__", _must_not_run)
    args = PODSConfig(
        **fast_args(output_dir=str(tmp_path), num_generations=4, use_vllm=True, vllm_enable_sleep_mode=True)
    )
    with pytest.raises(ValueError, match="vLLM's CPU engine has no sleep mode"):
        PODSTrainer(model="unused", reward_funcs=vowel_reward, args=args)


def _must_not_run(*args, **kwargs):
    raise AssertionError("GRPOTrainer.__init__ ran (and loaded the model) before the settings were checked")
