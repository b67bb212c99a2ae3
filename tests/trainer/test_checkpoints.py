"""PODSTrainer's atomic checkpoints keep Trainer's bookkeeping right: the best checkpoint, rotation, pushes."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from support import char_tokenizer, fast_args, make_trainer, prompt_dataset, tiny_llama, vowel_reward
from transformers import TrainerCallback

from pods_rl import PODSConfig, PODSTrainer

# The evaluation score after each step: step 2 is the best, and later steps are saved after it.
SCORES = {1: 1.0, 2: 5.0, 3: 2.0, 4: 3.0}


class ScriptedEvaluation(PODSTrainer):
    """A PODSTrainer whose evaluation returns a scripted score, so that which checkpoint is best is known."""

    def evaluate(self, *args, **kwargs):
        metrics = {"eval_score": SCORES[self.state.global_step]}
        self.log(metrics)
        return metrics


class CheckpointsAfterEachSave(TrainerCallback):
    def __init__(self):
        self.seen: dict[int, list[str]] = {}

    def on_save(self, args, state, control, **kwargs):
        self.seen[state.global_step] = sorted(p.name for p in Path(args.output_dir).glob("*checkpoint*"))


def test_best_checkpoint_is_tracked_protected_and_loaded(tmp_path):
    tokenizer = char_tokenizer()
    args = fast_args(
        output_dir=str(tmp_path),
        num_generations=4,
        num_selected=2,
        max_steps=4,
        save_strategy="steps",
        save_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=4,
        metric_for_best_model="score",
        greater_is_better=True,
        load_best_model_at_end=True,
        save_total_limit=1,
    )
    trainer = ScriptedEvaluation(
        model=tiny_llama(tokenizer),
        reward_funcs=vowel_reward,
        args=PODSConfig(**args),
        train_dataset=prompt_dataset(),
        eval_dataset=prompt_dataset(4),
        processing_class=tokenizer,
    )
    saves = CheckpointsAfterEachSave()
    trainer.add_callback(saves)
    trainer.train()  # before the fix: FileNotFoundError (the recorded best checkpoint no longer existed)

    best = tmp_path / "checkpoint-2"
    assert trainer.state.best_global_step == 2
    assert trainer.state.best_model_checkpoint == str(best)
    # Rotation keeps the best checkpoint next to the newest one; at the end save_total_limit=1 keeps the best alone.
    assert saves.seen == {
        1: ["checkpoint-1"],
        2: ["checkpoint-2"],
        3: ["checkpoint-2", "checkpoint-3"],
        4: ["checkpoint-2", "checkpoint-4"],
    }
    assert sorted(p.name for p in tmp_path.glob("*checkpoint*")) == ["checkpoint-2"]
    # The saved Trainer state names the real folder, so a resumed run still knows its best checkpoint.
    saved_state = json.loads((best / "trainer_state.json").read_text())
    assert saved_state["best_model_checkpoint"] == str(best)
    # load_best_model_at_end: the model in memory is the one saved at step 2, not the last one.
    saved = load_file(best / "model.safetensors")
    for name, parameter in trainer.model.state_dict().items():
        torch.testing.assert_close(parameter, saved[name], rtol=0, atol=0, msg=name)


def test_pushes_the_renamed_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path, num_generations=4, num_selected=2, save_strategy="steps", save_steps=1)
    trainer.args.push_to_hub = True  # after construction: no hub repository is created
    pushed = []

    def record_push(folder):
        checkpoints = sorted(p.name for p in tmp_path.glob("*checkpoint*"))
        pushed.append((folder, sorted(p.name for p in Path(folder).iterdir()), checkpoints))

    trainer._push_from_checkpoint = record_push
    trainer.train()
    assert [folder for folder, _, _ in pushed] == [str(tmp_path / "checkpoint-1"), str(tmp_path / "checkpoint-2")]
    for _, files, _ in pushed:
        assert {"model.safetensors", "optimizer.pt", "trainer_state.json"} <= set(files)
    # A push starts once the checkpoint is in place, with no staging folder around that it could pick up.
    assert [checkpoints for _, _, checkpoints in pushed] == [["checkpoint-1"], ["checkpoint-1", "checkpoint-2"]]
