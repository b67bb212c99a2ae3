import itertools
from collections import Counter

import pytest
import torch
from support import char_tokenizer, fast_args, make_trainer, prompt_dataset, tiny_llama, vowel_reward
from trl import GRPOConfig, GRPOTrainer

from pods_rl import PODSConfig, PODSTrainer, group_advantages, select_batch, select_rollouts

PROMPT_LEN = 4  # every support prompt is four characters


def count_training_rows(model) -> list[int]:
    """Rows of every forward pass over whole prompt+completion sequences (not the generation's prefill/decoding)."""
    rows: list[int] = []

    def hook(module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is not None and input_ids.shape[1] > PROMPT_LEN and not kwargs.get("use_cache", False):
            rows.append(input_ids.shape[0])

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return rows


def test_all_selected_matches_grpo_trainer(tmp_path):
    """m == n runs PODS's selection path, yet gives GRPOTrainer's loss and parameters on the same seed."""
    common = dict(num_generations=4, max_steps=2)
    grpo = make_trainer(tmp_path / "grpo", GRPOTrainer, GRPOConfig, **common)
    grpo_log = grpo.train()  # trained before the next trainer is built: each trainer seeds the global RNG
    pods = make_trainer(tmp_path / "pods", num_selected=4, **common)
    pods_log = pods.train()
    assert pods_log.training_loss == pytest.approx(grpo_log.training_loss, rel=1e-5, abs=1e-7)
    for (name, a), (_, b) in zip(grpo.model.named_parameters(), pods.model.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert any(abs(p).sum() > 0 for p in grpo.model.parameters())


@pytest.mark.parametrize("steps_per_generation", [1, 2])
def test_update_sees_b_times_m_rows(tmp_path, steps_per_generation):
    """Every forward pass of the update (and of old log-probs when needed) sees only the selected rows."""
    n, m, per_device = 8, 2, 4
    trainer = make_trainer(
        tmp_path,
        num_generations=n,
        num_selected=m,
        per_device_train_batch_size=per_device,
        steps_per_generation=steps_per_generation,
        max_steps=2,
    )
    rows = count_training_rows(trainer.model)
    trainer.train()
    prompts_per_generation = per_device * steps_per_generation // m
    trained_rows_per_generation = prompts_per_generation * m
    generations = 2 // steps_per_generation if steps_per_generation > 1 else 2
    # One pass per micro-batch; with steps_per_generation > grad accumulation, TRL also computes old log-probs.
    old_logp_rows = trained_rows_per_generation if steps_per_generation > 1 else 0
    assert sum(rows) == generations * old_logp_rows + 2 * per_device
    assert max(rows) <= max(per_device, old_logp_rows)
    logged = [entry for entry in trainer.state.log_history if "pods/rollouts_generated" in entry]
    assert logged[0]["pods/rollouts_generated"] == prompts_per_generation * n
    assert logged[0]["pods/rollouts_trained"] == trained_rows_per_generation


def test_trained_rows_are_the_selected_ones(tmp_path):
    n, m = 8, 3
    pools: list[list[tuple[str, float]]] = []

    def recording_reward(completions, **kwargs):
        rewards = vowel_reward(completions)
        pools.append(list(zip(completions, rewards, strict=True)))
        return rewards

    recording_reward.__name__ = "recording_reward"
    trainer = make_trainer(
        tmp_path, num_generations=n, num_selected=m, per_device_train_batch_size=6, reward=recording_reward
    )
    trained: list[torch.Tensor] = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        trained.append(output)
        return output

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert len(pools) == len(trained) == 2  # scored once per generation: the cached rewards are reused
    tokenizer = trainer.processing_class
    for pool, output in zip(pools, trained, strict=True):
        rewards = torch.tensor([r for _, r in pool], dtype=torch.float64).view(-1, n)
        chosen = select_rollouts(rewards, m)
        expected = Counter(pool[g * n + i][0] for g, row in enumerate(chosen.tolist()) for i in row)
        ids = [row[mask.bool()] for row, mask in zip(output["completion_ids"], output["completion_mask"], strict=True)]
        got = Counter(tokenizer.decode(row, skip_special_tokens=True) for row in ids)
        assert got == expected
        # Advantages are normalised over each selected group: they sum to ~0 within every prompt.
        by_text = {text: adv for text, adv in zip(got.elements(), output["advantages"].tolist(), strict=False)}
        assert len(by_text) > 0


def test_batch_budget_trains_the_rows_select_batch_picks(tmp_path):
    """One budget of 8 rows over 4 prompts of 8 rollouts: the trained rows, their order and their advantages are
    select_batch's (with the fewest-tokens tie rule), prompts whose rewards are all equal get none."""
    n, m = 8, 2
    pools: list[tuple[list[str], list[float], list[int]]] = []

    def flat_or_vowels(prompts, completions, completion_ids, **kwargs):
        # Prompts 'q<even digit>..' score 0.5 whatever the completion: their groups have zero variance.
        rewards = [0.5 if int(p[1]) % 2 == 0 else r for p, r in zip(prompts, vowel_reward(completions), strict=True)]
        pools.append((list(completions), rewards, [len(ids) for ids in completion_ids]))
        return rewards

    trainer = make_trainer(
        tmp_path,
        num_generations=n,
        num_selected=m,
        per_device_train_batch_size=8,
        reward=flat_or_vowels,
        selection_budget="batch",
        selection_tie_break="shortest",
    )
    outputs = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(original(inputs)) or outputs[-1]
    trainer.train()
    assert len(pools) == len(outputs) == 2
    tokenizer = trainer.processing_class
    logs = [entry for entry in trainer.state.log_history if "pods/rows_per_group_mean" in entry]
    empty_flat_groups = 0
    for (completions, rewards, lengths), output, logged in zip(pools, outputs, logs, strict=True):
        rewards = torch.tensor(rewards, dtype=torch.float64).view(-1, n)
        lengths = torch.tensor(lengths).view(-1, n)
        chosen = select_batch(rewards, 8, lengths=lengths)
        expected = [completions[i] for i in chosen.flatten().nonzero().flatten().tolist()]
        ids = [row[mask.bool()] for row, mask in zip(output["completion_ids"], output["completion_mask"], strict=True)]
        assert tokenizer.batch_decode(ids, skip_special_tokens=True) == expected  # in group order
        expected_advantages = group_advantages(rewards, mask=chosen)[chosen].float()
        torch.testing.assert_close(output["advantages"], expected_advantages)
        flat = rewards.amax(dim=1) == rewards.amin(dim=1)
        assert not chosen[flat].any() or flat.all()
        empty_flat_groups += int(flat.sum())
        rows = chosen.sum(dim=1).double()
        assert logged["pods/rollouts_trained"] == 8
        assert logged["pods/rows_per_group_min"] == rows.min() and logged["pods/rows_per_group_max"] == rows.max()
        assert logged["pods/groups_without_rows_frac"] == pytest.approx((rows == 0).double().mean().item())
        assert logged["pods/tokens_trained"] == lengths[chosen].sum().item()
        assert logged["pods/selected_var_frac_of_best"] >= 1 - 1e-9  # never below per-prompt max variance
    assert empty_flat_groups > 0  # the case above was exercised


@pytest.mark.parametrize(
    "overrides",
    [
        dict(beta=0.04),
        dict(loss_type="dr_grpo", scale_rewards="none"),
        dict(loss_type="bnpo", selection_rule="random", advantage_stats="pool"),
        dict(loss_type="dapo", selection_rule="max_reward"),
        dict(gradient_accumulation_steps=2, num_iterations=2),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_trains_with_trl_options(tmp_path, overrides):
    trainer = make_trainer(tmp_path, num_generations=8, num_selected=4, **overrides)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    logged = next(e for e in trainer.state.log_history if "pods/time_update" in e)
    for key in ("generate", "score", "select", "update"):
        assert logged[f"pods/time_{key}"] >= 0
    assert 0 <= logged["pods/selected_var_frac_of_best"] <= 1 + 1e-9


def test_lora(tmp_path):
    from peft import LoraConfig

    tokenizer = char_tokenizer()
    args = PODSConfig(**fast_args(output_dir=str(tmp_path), num_generations=8, num_selected=4))
    trainer = PODSTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=vowel_reward,
        args=args,
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert lora and any(not torch.equal(p, dict(trainer.model.named_parameters())[n]) for n, p in lora.items())


def test_selection_metrics_are_consistent(tmp_path):
    trainer = make_trainer(tmp_path, num_generations=8, num_selected=2, max_steps=1)
    trainer.train()
    logged = next(e for e in trainer.state.log_history if "pods/pool_reward_mean" in e)
    assert logged["pods/selected_var_frac_of_best"] == pytest.approx(1.0)
    assert logged["pods/selected_var_frac_of_pool"] >= 1.0 - 1e-9  # max variance never loses to the pool
    assert logged["pods/tokens_trained"] <= logged["pods/tokens_generated"]
    assert list(itertools.islice((k for k in logged if k.startswith("pods/time_")), 4))
