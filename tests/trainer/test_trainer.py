import inspect
import itertools
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support import (
    char_tokenizer,
    fast_args,
    make_trainer,
    prompt_dataset,
    scripted_rollouts,
    tiny_llama,
    vowel_reward,
)
from torch import nn
from trl import GRPOConfig, GRPOTrainer

from pods_rl import PODSConfig, PODSTrainer, group_advantages, select_batch, select_rollouts
from pods_rl.trainer.trainer import RewardError

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


def odd_length_only(completions, **kwargs):
    """Scores only completions of odd length: rollouts that no function scores exist."""
    return [vowel_reward([text])[0] if len(text) % 2 else None for text in completions]


def length_reward(completions, **kwargs):
    return [len(text) / 8 for text in completions]


GRPO_LOGGED = ("loss", "reward", "reward_std", "frac_reward_zero_std", "entropy")


@pytest.mark.parametrize(
    "overrides",
    [
        dict(loss_type="grpo"),
        dict(loss_type="bnpo"),
        dict(loss_type="dr_grpo"),
        dict(loss_type="dapo"),
        dict(loss_type="grpo", scale_rewards="batch"),
        dict(loss_type="grpo", scale_rewards="none"),
        dict(multi_objective_aggregation="normalize_then_sum", reward=[vowel_reward, length_reward]),
        dict(reward=odd_length_only, max_steps=4),
        dict(beta=0.04, num_iterations=2, max_steps=4),
    ],
    ids=lambda o: ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in o.items()),
)
def test_all_selected_matches_grpo_trainer(tmp_path, overrides):
    """m == n gives GRPOTrainer's numbers on the same seed: losses, parameter updates, logged rewards and advantages.

    Both train with plain SGD, so an update is lr times the gradient and can be compared tightly. Under AdamW the
    first step moves every element by about lr * sign(gradient): an element whose gradient cancels to ~1e-9 flips
    sign with float rounding (PODS computes advantages in float64, TRL in float32) and the weights then differ by
    2 * lr on some CPUs and not on others.
    """
    common = {"num_generations": 4, "max_steps": 2, "optim": "sgd", **overrides}
    grpo = make_trainer(tmp_path / "grpo", GRPOTrainer, GRPOConfig, **common)
    initial = {name: value.detach().clone() for name, value in grpo.model.named_parameters()}
    grpo.train()  # trained before the next trainer is built: each trainer seeds the global RNG
    pods = make_trainer(tmp_path / "pods", num_selected=4, **common)
    pods.train()
    logged = [entry for entry in grpo.state.log_history if "loss" in entry]
    pods_logged = [entry for entry in pods.state.log_history if "loss" in entry]
    assert len(logged) == len(pods_logged) == common["max_steps"]
    for expected, got in zip(logged, pods_logged, strict=True):
        keys = [key for key in expected if key in GRPO_LOGGED or key.startswith("rewards/")]
        assert [key for key in keys if got[key] is None] == [key for key in keys if expected[key] is None]
        assert {key: got[key] for key in keys if got[key] is not None} == pytest.approx(
            {key: expected[key] for key in keys if expected[key] is not None}, rel=1e-5, abs=1e-7
        )
    assert list(pods._logs["advantages"]) == pytest.approx(list(grpo._logs["advantages"]), rel=1e-4, abs=1e-6)
    updates = []
    for (name, a), (_, b) in zip(grpo.model.named_parameters(), pods.model.named_parameters(), strict=True):
        update = a.detach() - initial[name]
        torch.testing.assert_close(b.detach() - initial[name], update, rtol=1e-4, atol=1e-7, msg=name)
        updates.append(update.abs().max().item())
    assert max(updates) > 1e-5  # the updates compared are not all zero


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


def spy_on_generations(trainer) -> list[dict]:
    """Every `_generate_and_score_completions` output (trained rows in selection order, before TRL shuffles them),
    with the decoded completions added under `texts`."""
    outputs: list[dict] = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        ids = [row[mask.bool()] for row, mask in zip(output["completion_ids"], output["completion_mask"], strict=True)]
        outputs.append({**output, "texts": trainer.processing_class.batch_decode(ids, skip_special_tokens=True)})
        return output

    trainer._generate_and_score_completions = spy
    return outputs


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
    trained = spy_on_generations(trainer)
    trainer.train()
    assert len(pools) == len(trained) == 2  # scored once per generation: the cached rewards are reused
    for pool, output in zip(pools, trained, strict=True):
        rewards = torch.tensor([r for _, r in pool], dtype=torch.float64).view(-1, n)
        chosen = select_rollouts(rewards, m)
        expected = [[pool[g * n + i][0] for i in row] for g, row in enumerate(chosen.tolist())]
        got = [output["texts"][g * m : (g + 1) * m] for g in range(len(expected))]  # group by group, m each
        assert got == expected
        # Advantages are normalised over each selected group (the paper's subset statistics).
        selected_rewards = rewards.gather(1, chosen)
        mean, std = selected_rewards.mean(dim=1, keepdim=True), selected_rewards.std(dim=1, keepdim=True)
        advantages = output["advantages"].double().view(-1, m)
        torch.testing.assert_close(advantages, (selected_rewards - mean) / (std + 1e-4), rtol=1e-5, atol=1e-6)
        assert advantages.abs().sum() > 0


def test_unscorable_rollouts_train_with_zero_advantage(tmp_path):
    """Rollouts that no reward function scores: groups short of m scorable ones keep them all, no crash."""
    n, m = 8, 4
    trainer = make_trainer(tmp_path, num_generations=n, num_selected=m, reward=odd_length_only)
    trained = spy_on_generations(trainer)
    trainer.train()
    short_groups = 0
    for output in trained:
        for g in range(len(output["texts"]) // m):
            texts = output["texts"][g * m : (g + 1) * m]
            advantages = output["advantages"][g * m : (g + 1) * m].tolist()
            scorable = [len(text) % 2 == 1 for text in texts]
            short_groups += not all(scorable)
            assert [a for a, ok in zip(advantages, scorable, strict=True) if not ok] == [0.0] * scorable.count(False)
            assert sum(a for a, ok in zip(advantages, scorable, strict=True) if ok) == pytest.approx(0.0, abs=1e-5)
    assert short_groups > 0  # the case under test happened


def test_iterable_dataset_trains_like_the_map_style_one(tmp_path):
    """An IterableDataset streams whole pools of n per prompt: without shuffling, the same run as the Dataset."""
    common = dict(num_generations=8, num_selected=2, max_steps=2, shuffle_dataset=False)
    prompts: list[list[str]] = []

    def recording_reward(completions, **kwargs):
        prompts.append(list(kwargs["prompts"]))
        return vowel_reward(completions)

    stream = make_trainer(
        tmp_path / "stream", reward=recording_reward, train_dataset=prompt_dataset().to_iterable_dataset(), **common
    )
    stream.train()
    mapped = make_trainer(tmp_path / "map", reward=vowel_reward, **common)
    mapped.train()
    for pool in prompts:
        assert [len(set(pool[i : i + 8])) for i in range(0, len(pool), 8)] == [1] * (len(pool) // 8)
    assert [p[0] for p in prompts] == [prompt_dataset()["prompt"][0], prompt_dataset()["prompt"][2]]
    losses = [[e["loss"] for e in t.state.log_history if "loss" in e] for t in (stream, mapped)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-7)
    for a, b in zip(stream.model.parameters(), mapped.model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_evaluation_generates_n_per_prompt(tmp_path):
    n, m = 8, 4
    trainer = make_trainer(
        tmp_path, num_generations=n, num_selected=m, max_steps=1, eval_strategy="steps", eval_steps=1,
        per_device_eval_batch_size=n, eval_dataset=prompt_dataset(2),
    )  # fmt: skip
    sizes = []
    original = trainer._generate

    def spy(prompts):
        sizes.append((trainer.model.training, len(prompts)))
        return original(prompts)

    trainer._generate = spy
    trainer.train()
    assert (False, n) in sizes  # one prompt's n rollouts per eval batch, none removed
    assert any("eval_reward" in entry for entry in trainer.state.log_history)


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
        dict(scale_rewards="batch", advantage_stats="pool"),
        dict(multi_objective_aggregation="normalize_then_sum", reward=[vowel_reward, length_reward]),
    ],
    ids=lambda o: ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in o.items()),
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


@pytest.mark.parametrize("rule", ["random", "max_variance"])
def test_selection_metrics_match_brute_force(tmp_path, rule):
    """The logged variance fractions, recomputed from the recorded pools: the best subset by brute force, the
    random rule's draws replayed from the same seed."""
    n, m = 8, 2
    pools: list[list[float]] = []

    def recording_reward(completions, **kwargs):
        pools.append(vowel_reward(completions))
        return pools[-1]

    trainer = make_trainer(
        tmp_path, num_generations=n, num_selected=m, selection_rule=rule, max_steps=1, reward=recording_reward
    )
    trainer.train()
    logged = next(e for e in trainer.state.log_history if "pods/pool_reward_mean" in e)
    rewards = torch.tensor(pools[0], dtype=torch.float64).view(-1, n)
    chosen = select_rollouts(rewards, m, rule, generator=torch.Generator().manual_seed(0))
    selected_var = rewards.gather(1, chosen).var(dim=1, unbiased=False).sum()
    best_var = sum(
        max(torch.tensor(subset).var(unbiased=False) for subset in itertools.combinations(group.tolist(), m))
        for group in rewards
    )
    pool_var = rewards.var(dim=1, unbiased=False).sum()
    assert logged["pods/selected_var_frac_of_best"] == pytest.approx((selected_var / best_var).item())
    assert logged["pods/selected_var_frac_of_pool"] == pytest.approx((selected_var / pool_var).item())
    assert logged["pods/pool_reward_mean"] == pytest.approx(rewards.mean().item())
    assert logged["pods/selected_reward_mean"] == pytest.approx(rewards.gather(1, chosen).mean().item())
    if rule == "random":
        assert logged["pods/selected_var_frac_of_best"] < 1  # this seed's draws are not the best subsets
    tokens = logged["pods/tokens_trained"], logged["pods/tokens_generated"]
    assert 0 < tokens[0] < tokens[1]


def test_down_sampling_keeps_every_row_field_aligned(tmp_path):
    """After removal, every per-row field follows its row: rollout_func extra fields (which also reach the reward
    functions, merged as TRL merges them), dataset images on the rollout_func path, environments, log_extra columns."""
    n, m = 4, 2
    pool_rewards = [0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 0.0, 9.0]

    def tag_reward(completions, tag, log_extra, **kwargs):
        log_extra("tag", list(tag))
        return [pool_rewards[t] for t in tag]

    trainer = make_trainer(tmp_path, num_generations=n, num_selected=m, reward=tag_reward)
    rows = range(2 * n)
    inputs = [{"prompt": f"q{r // n}0=", "images": [f"image of prompt {r // n}"]} for r in rows]
    prompts = [row["prompt"] for row in inputs]
    trainer.environment_factories = {None: object}
    trainer.environments = [f"environment {r}" for r in rows]
    trainer._batch_environments = [f"name {r}" for r in rows]
    generated = (
        [[5, 6, 7, 8]] * len(rows),
        [[10 + r, 1] for r in rows],
        [[1, 0] for r in rows],
        [f"completion {r}" for r in rows],
        [[-0.5 * r, -1.0] for r in rows],
        {"tag": list(rows), "constant": 7},
        None,  # the rollout_func path returns no images: TRL falls back to the dataset's
        [],
    )
    trainer._pool_inputs = inputs
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra, images, tool_images = trainer._down_sample(
        prompts, generated
    )
    keep = (select_rollouts(torch.tensor(pool_rewards).view(2, n), m) + torch.tensor([[0], [n]])).flatten().tolist()
    assert keep == [0, 3, 6, 7]
    assert completions == [f"completion {r}" for r in keep]
    assert completion_ids == [[10 + r, 1] for r in keep]
    assert logprobs == [[-0.5 * r, -1.0] for r in keep]
    assert extra == {"tag": keep, "constant": 7}
    assert images == [[f"image of prompt {r // n}"] for r in keep]
    assert trainer.environments == [f"environment {r}" for r in keep]
    assert trainer._batch_environments == [f"name {r}" for r in keep]
    assert trainer._pending_extra_logs["tag"] == keep
    assert prompts == [f"q{r // n}0=" for r in keep]  # TRL's lists, shrunk in place
    assert [row["prompt"] for row in inputs] == prompts
    assert prompt_ids == [[5, 6, 7, 8]] * len(keep) and tool_mask == [[1, 0]] * len(keep) and tool_images == []


def test_logs_describe_the_pool_and_the_advantages_used(tmp_path):
    """TRL's reward metrics describe the pool (as a GRPO run with n would log them); `pods/selected_*` the trained
    subset; the completions table lists the trained rows with the advantages the update used (pool statistics)."""
    n, m = 8, 2
    pools: list[list[float]] = []

    def recording_reward(completions, log_extra, **kwargs):
        pools.append(vowel_reward(completions))
        log_extra("reward_copy", pools[-1])
        return pools[-1]

    trainer = make_trainer(
        tmp_path, num_generations=n, num_selected=m, advantage_stats="pool", max_steps=1, reward=recording_reward
    )
    trained = spy_on_generations(trainer)
    trainer.train()
    logged = next(e for e in trainer.state.log_history if "reward" in e)
    pool = torch.tensor(pools[0])
    assert logged["reward"] == pytest.approx(pool.mean().item())
    assert logged["reward_std"] == pytest.approx(pool.std().item())
    assert logged["rewards/recording_reward/mean"] == pytest.approx(pool.mean().item())
    kept = vowel_reward(trained[0]["texts"])
    assert logged["pods/selected_reward_mean"] == pytest.approx(torch.tensor(kept).mean().item())
    assert logged["pods/selected_reward_mean"] != pytest.approx(logged["reward"])
    assert list(trainer._logs["completion"]) == trained[0]["texts"]
    assert list(trainer._logs["rewards"]["recording_reward"]) == pytest.approx(kept)
    assert list(trainer._logs["extra"]["reward_copy"]) == pytest.approx(kept)
    assert list(trainer._logs["advantages"]) == pytest.approx(trained[0]["advantages"].tolist())
    groups = pool.double().view(-1, n)
    chosen = torch.tensor(kept, dtype=torch.float64).view(-1, m)
    expected = (chosen - groups.mean(dim=1, keepdim=True)) / (groups.std(dim=1, keepdim=True) + 1e-4)
    torch.testing.assert_close(trained[0]["advantages"].double().view(-1, m), expected, rtol=1e-5, atol=1e-6)


def test_environment_owned_data_gets_one_placeholder_prompt_per_trained_group(tmp_path, monkeypatch):
    """Without a train_dataset, TRL's placeholder has generation_batch_size / n prompts: too few for PODS's sampler,
    which draws generation_batch_size / m per generation (here TRL's would hold 4 / 8 = 0 prompts). PODSTrainer
    passes its own."""
    received = {}

    def fake_init(self, model, reward_funcs, args, **kwargs):
        received.update(kwargs)
        raise InterruptedError

    monkeypatch.setattr(GRPOTrainer, "__init__", fake_init)
    args = PODSConfig(**fast_args(output_dir=str(tmp_path), num_generations=8, num_selected=2, max_steps=1))
    with pytest.raises(InterruptedError):
        PODSTrainer(model="unused", reward_funcs=vowel_reward, args=args, environment_factory=object)
    assert len(received["train_dataset"]) == args.generation_batch_size // 2 == 2
    stub = SimpleNamespace(args=args, num_iterations=1, shuffle_dataset=False)
    sampler = PODSTrainer._get_train_sampler(stub, received["train_dataset"])
    assert len(list(sampler)) == args.local_pool_size  # one generation batch: both prompts, 8 rollouts each


def test_constructor_takes_grpo_trainers_parameters():
    """Same names, order, kinds and defaults as GRPOTrainer.__init__, so every call that builds one builds the other."""

    def described(function):
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    assert described(PODSTrainer.__init__) == described(GRPOTrainer.__init__)


def test_positional_arguments_reach_grpo_trainer(tmp_path, monkeypatch):
    received = {}

    def fake_init(self, model, reward_funcs, args, **kwargs):
        received.update(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        raise InterruptedError

    monkeypatch.setattr(GRPOTrainer, "__init__", fake_init)
    args = PODSConfig(**fast_args(output_dir=str(tmp_path), num_generations=4, num_selected=2))
    dataset, eval_dataset, tokenizer = prompt_dataset(), prompt_dataset(4), char_tokenizer()
    with pytest.raises(InterruptedError):
        PODSTrainer("unused", vowel_reward, args, dataset, eval_dataset, tokenizer)
    assert received["model"] == "unused" and received["reward_funcs"] is vowel_reward and received["args"] is args
    assert received["train_dataset"] is dataset and received["eval_dataset"] is eval_dataset
    assert received["processing_class"] is tokenizer


BAD_SAMPLE = 2  # the sample whose reward is NaN or inf in the tests below


def rewards_with(bad: float, size: int) -> list[float]:
    return [bad if i == BAD_SAMPLE else 0.5 for i in range(size)]


class Scorer(nn.Module):
    """A reward model (an nn.Module, as TRL calls one): 0.5 for every sample but BAD_SAMPLE, which gets `bad`."""

    def __init__(self, bad: float):
        super().__init__()
        self.config = SimpleNamespace(_name_or_path="models/scorer")
        self.bad = bad

    def forward(self, input_ids, **kwargs):
        return SimpleNamespace(logits=torch.tensor(rewards_with(self.bad, len(input_ids))).unsqueeze(1))


def reward_trainer(tmp_path, reward, settings: dict | None = None, **kwargs) -> PODSTrainer:
    """A PODSTrainer on the tiny model with n = 4, m = 2 (and `settings`), built from an in-memory model."""
    tokenizer = char_tokenizer()
    args = PODSConfig(
        **fast_args(output_dir=str(tmp_path), num_generations=4, num_selected=2, max_steps=1, **(settings or {}))
    )
    return PODSTrainer(tiny_llama(tokenizer), reward, args, prompt_dataset(), processing_class=tokenizer, **kwargs)


def score_four_samples(trainer: PODSTrainer) -> torch.Tensor:
    prompts = [f"q{i}=" for i in range(4)]
    completions = ["ab", "cd", "ef", "gh"]
    ids = [trainer.processing_class(text)["input_ids"] for text in completions]
    return trainer._calculate_rewards([{"prompt": p} for p in prompts], prompts, completions, ids)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_nonfinite_reward_of_a_function_names_it_and_the_sample(tmp_path, kind, bad):
    """Checked before TRL turns None into NaN, so NaN is an error, not "does not apply"."""

    def flaky(completions, **kwargs):
        return rewards_with(bad, len(completions))

    async def flaky_async(completions, **kwargs):
        return rewards_with(bad, len(completions))

    trainer = reward_trainer(tmp_path, flaky if kind == "sync" else flaky_async)
    name = "flaky" if kind == "sync" else "flaky_async"
    with pytest.raises(RewardError, match=rf"Reward function '{name}' returned {bad!r} for sample 2 \(prompt 'q2="):
        score_four_samples(trainer)


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        (1e39, "1e+39"),  # a finite float, but an infinite float32, as TRL stores rewards
        (-3.5e38, "-3.5e+38"),
        (np.float64(1e300), "np.float64(1e+300)"),
        (10**400, "1" + "0" * 56 + "..."),  # beyond any float: OverflowError in float()
        ("0.5", "'0.5'"),
    ],
    ids=["1e39", "-3.5e38", "numpy-1e300", "10**400", "string"],
)
def test_reward_beyond_float32_or_not_a_number_names_it_and_the_sample(tmp_path, bad, shown):
    def huge(completions, **kwargs):
        return rewards_with(bad, len(completions))

    trainer = reward_trainer(tmp_path, huge)
    with pytest.raises(RewardError, match=rf"Reward function 'huge' returned {re.escape(shown)} for sample 2 \(prompt"):
        score_four_samples(trainer)
    assert score_four_samples(reward_trainer(tmp_path, lambda completions, **kwargs: [3.4e38, 1, True, None]))[
        :, 0
    ].isfinite().tolist() == [True, True, True, False]  # float32's largest, an int, a bool; None stays NaN


@pytest.mark.parametrize("returned", [[0.5] * 3, 0.5, None])
def test_reward_function_returning_other_than_one_reward_per_sample_is_an_error(tmp_path, returned):
    def miscounted(completions, **kwargs):
        return returned

    got = "3 rewards" if isinstance(returned, list) else f"a {type(returned).__name__}"
    with pytest.raises(RewardError, match=rf"Reward function 'miscounted' returned {got} for 4 samples"):
        score_four_samples(reward_trainer(tmp_path, miscounted))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_score_of_a_reward_model_names_it_and_the_sample(tmp_path, bad):
    """A reward model never means "does not apply": a NaN score is an error like inf, not an unscorable rollout."""
    trainer = reward_trainer(tmp_path, Scorer(bad), reward_processing_classes=[char_tokenizer()])
    with pytest.raises(RewardError, match=rf"Reward model 'scorer' returned {bad!r} for sample 2 \(prompt 'q2="):
        score_four_samples(trainer)


def test_finite_scores_of_a_reward_model_pass(tmp_path):
    trainer = reward_trainer(tmp_path, Scorer(0.25), reward_processing_classes=[char_tokenizer()])
    assert score_four_samples(trainer).flatten().tolist() == [0.5, 0.5, 0.25, 0.5]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_reward_from_a_rollout_func_extra_field_names_the_sample(tmp_path, bad):
    """A rollout function's extra field (here an environment's reward) reaches the reward function as a column."""

    def rollouts_with_env_reward(prompts, trainer):
        output = scripted_rollouts(prompts, trainer)
        return {**output, "env_reward": rewards_with(bad, len(prompts))}

    def env_reward(completions, env_reward, **kwargs):
        return list(env_reward)

    trainer = reward_trainer(tmp_path, env_reward, rollout_func=rollouts_with_env_reward)
    with pytest.raises(RewardError, match=rf"Reward function 'env_reward' returned {bad!r} for sample 2 \(prompt "):
        trainer.train()


def crafted_rollouts(pool: list[dict]):
    """A rollout_func giving row i the rollout `pool[i % n]`: `model` tokens by the model, `env` environment tokens
    among them (env_mask 0), ending in EOS unless `truncated`. The pool position travels as an extra field."""

    def rollout(prompts, trainer):
        tokenizer = trainer.processing_class
        a, b = tokenizer.convert_tokens_to_ids(["a", "b"])
        completions, masks = [], []
        for i in range(len(prompts)):
            spec = pool[i % len(pool)]
            last = a if spec.get("truncated") else tokenizer.eos_token_id
            completions.append([a] * (spec["model"] - 1) + [b] * spec.get("env", 0) + [last])
            masks.append([1] * (spec["model"] - 1) + [0] * spec.get("env", 0) + [1])
        return {
            "prompt_ids": tokenizer(prompts, add_special_tokens=False)["input_ids"],
            "completion_ids": completions,
            "logprobs": [[-0.5] * len(ids) for ids in completions],
            "env_mask": masks,
            "position": [i % len(pool) for i in range(len(prompts))],
        }

    def reward(completions, position, **kwargs):
        return [pool[p]["reward"] for p in position]

    return rollout, reward


def train_on_crafted_pool(tmp_path, pool: list[dict], **settings) -> tuple[list[int], dict, dict]:
    """One generation (2 prompts, n = 4, m = 2) on `pool`: the trained pool positions, the output and the metrics."""
    rollout, reward = crafted_rollouts(pool)
    trainer = reward_trainer(tmp_path, reward, settings, rollout_func=rollout)
    inputs = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    output = trainer._generate_and_score_completions(inputs)
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items() if key.startswith("pods/")}
    return [row["position"] for row in inputs], output, metrics


def test_rows_whose_loss_is_masked_are_not_selected(tmp_path):
    """With mask_truncated_completions, truncated rows with reward 0 would take the low-reward slot (the index
    tie-break takes the highest index of equal rewards) and then train nothing; the complete row with reward 0
    is taken instead."""
    pool = [
        dict(model=3, reward=1.0),
        dict(model=3, reward=0.0),
        dict(model=8, reward=0.0, truncated=True),
        dict(model=8, reward=0.0, truncated=True),
    ]
    trained, output, metrics = train_on_crafted_pool(tmp_path, pool, mask_truncated_completions=True)
    assert trained == [0, 1, 0, 1]
    assert (output["completion_mask"].sum(dim=1) > 0).all()  # every trained row reaches the loss
    assert metrics["pods/tokens_trained"] == 2 * (3 + 3)
    assert metrics["pods/tokens_generated"] == 2 * (3 + 3 + 8 + 8)


def test_a_pool_short_of_unmasked_rows_is_filled_with_masked_ones(tmp_path):
    pool = [dict(model=3, reward=1.0), *[dict(model=8, reward=0.0, truncated=True)] * 3]
    trained, output, metrics = train_on_crafted_pool(tmp_path, pool, mask_truncated_completions=True)
    assert trained == [0, 1, 0, 1]  # m rows per prompt still, the filler by lowest index
    assert output["completion_mask"].sum(dim=1).tolist() == [3, 0, 3, 0]
    assert metrics["pods/tokens_trained"] == 2 * 3  # the masked rows' tokens reach no loss


def test_truncated_rows_are_selected_when_their_loss_counts(tmp_path):
    pool = [dict(model=3, reward=1.0), dict(model=3, reward=0.0), *[dict(model=8, reward=0.0, truncated=True)] * 2]
    trained, _, _ = train_on_crafted_pool(tmp_path, pool)  # mask_truncated_completions=False: TRL's default
    assert trained == [0, 3, 0, 3]


def test_shortest_tie_break_and_token_metrics_count_the_models_tokens(tmp_path):
    """Row 1 is the longest completion but has the fewest model tokens: environment output (env_mask 0) reaches
    no loss, so it is the shortest among the equally good subsets {one of rows 0, 1} + {one of rows 2, 3}."""
    pool = [
        dict(model=6, reward=1.0),
        dict(model=2, env=6, reward=1.0),
        dict(model=3, reward=0.0),
        dict(model=4, reward=0.0),
    ]
    trained, _, metrics = train_on_crafted_pool(tmp_path, pool, selection_tie_break="shortest")
    assert trained == [1, 2, 1, 2]
    assert metrics["pods/tokens_generated"] == 2 * (6 + 2 + 3 + 4)
    assert metrics["pods/tokens_trained"] == 2 * (2 + 3)


@pytest.mark.parametrize("bf16", [False, True])
def test_bf16_on_a_cpu_generates_under_one_autocast_over_fp32_weights(tmp_path, monkeypatch, bf16):
    """With bf16 on a CPU each of TRL's generation calls runs inside one bf16 autocast (the weights' casts are cached
    for the whole call), the update's forward under accelerate's, and the weights stay fp32; in fp32 no autocast."""
    seen = []
    generate = GRPOTrainer._generate

    def spy(self, prompts):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu"))
        return generate(self, prompts)

    monkeypatch.setattr(GRPOTrainer, "_generate", spy)
    trainer = make_trainer(tmp_path, num_generations=4, num_selected=2, bf16=bf16)
    forwards = []
    trainer.model.model.layers[0].mlp.register_forward_pre_hook(
        lambda *_: forwards.append(torch.is_autocast_enabled("cpu"))
    )
    trainer.train()
    assert seen == ([torch.bfloat16] if bf16 else [False]) * 2
    assert forwards and set(forwards) == {bf16}
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
