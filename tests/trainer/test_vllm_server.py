"""PODSTrainer with a vLLM server (TRL's server mode), against a stand-in for `trl vllm-serve`'s client.

No engine runs: the stand-in answers as the server would (n completions per distinct prompt, with per-token
log-probs), choosing completions and log-probs that name their row, so each trained row's provenance can be read
back from what reaches the loss. Runs in either environment.
"""

from typing import ClassVar

import pytest
import torch
import trl.generation.vllm_generation as trl_vllm
from support import make_trainer

import pods_rl.versions

N, M, PROMPTS = 8, 2, 2


class StandInServer:
    """Completion j of distinct prompt p is j 'a's then 'b's (vowel reward j/7); every token's log-prob is -code/100
    with code = 1 + 100 p + j."""

    instances: ClassVar[list["StandInServer"]] = []

    def __init__(self, base_url, group_port, connection_timeout):
        self.requests: list[tuple[int, int]] = []
        self.pushes: list[dict[str, torch.Tensor]] = []
        StandInServer.instances.append(self)

    def init_communicator(self, device):
        pass

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def generate(self, prompts, features=None, n=1, **sampling):
        self.requests.append((len(prompts), n))
        vocab = self.tokenizer.convert_tokens_to_ids
        completions, logprobs = [], []
        for p in range(len(prompts)):
            for j in range(n):
                ids = [vocab("a")] * j + [vocab("b")] * (n - 1 - j)
                completions.append(ids)
                logprobs.append([[-(1 + 100 * p + j) / 100]] * len(ids))
        return {"prompt_ids": prompts, "completion_ids": completions, "logprobs": logprobs, "logprob_token_ids": None}

    def update_named_params(self, metadata, params):
        self.pushes.append({name: param.detach().clone() for name, param in params})

    def reset_prefix_cache(self):
        pass


@pytest.fixture
def server_trainer(tmp_path, monkeypatch):
    monkeypatch.setattr(trl_vllm, "is_vllm_available", lambda: True)
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: True)
    monkeypatch.setattr(trl_vllm, "VLLMClient", StandInServer)
    StandInServer.instances.clear()
    trainer = make_trainer(
        tmp_path,
        num_generations=N,
        num_selected=M,
        per_device_train_batch_size=PROMPTS * M,
        max_completion_length=N,
        use_vllm=True,
        vllm_mode="server",
        vllm_importance_sampling_mode="token_truncate",
        vllm_importance_sampling_clip_max=1e6,
    )
    (server,) = StandInServer.instances
    server.tokenizer = trainer.processing_class
    return trainer, server


def test_trained_rows_keep_their_server_logprobs(server_trainer):
    trainer, server = server_trainer
    inputs = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    output = trainer._generate_and_score_completions(inputs)

    assert server.requests == [(PROMPTS, N)]  # each distinct prompt once, n completions each: the whole pool
    assert len(output["completion_ids"]) == PROMPTS * M
    mask = output["completion_mask"].bool()
    texts = trainer.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
    for row, text in enumerate(texts):
        j = text.count("a")
        assert j in (0, N - 1)  # max variance of rewards j/7 keeps each pool's extremes
        p = row // M  # rows stay grouped by prompt, in prompt order
        expected = torch.full((int(mask[row].sum()),), -(1 + 100 * p + j) / 100)
        torch.testing.assert_close(output["sampling_per_token_logps"][row][mask[row]], expected)
    ratio = output["importance_sampling_ratio"]
    expected_ratio = torch.exp(output["old_per_token_logps"] - output["sampling_per_token_logps"])
    torch.testing.assert_close(ratio[mask], expected_ratio[mask])


def test_weights_pushed_before_each_generation_after_an_update(server_trainer):
    trainer, server = server_trainer
    trainer.args.max_steps = 2
    initial = {name: param.detach().clone() for name, param in trainer.model.named_parameters()}
    trainer.train()
    assert server.requests == [(PROMPTS, N)] * 2
    assert len(server.pushes) == 2  # before step 1's generation (initial weights) and step 2's (after one update)
    first, second = server.pushes
    for name, value in initial.items():
        torch.testing.assert_close(first[name], value)
    moved = [name for name in initial if not torch.equal(second[name], initial[name])]
    assert moved, "the second push must carry the updated weights"
