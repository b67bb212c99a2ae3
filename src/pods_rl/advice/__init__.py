"""`pods advise`: a forecast, before training, of what GRPO, PODS, dynamic sampling and rollout allocation would learn
per step and per second on a model, task and machine (`forecast`: the maths, pure; `report`: the table, the paragraph
and advice.json; `pods_rl.run.advise`: the base model's rollouts and the step costs)."""
