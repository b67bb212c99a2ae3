"""`pods compare`: the comparison of training arms over seeds, apart from the training run (`pods_rl.run`).

settings (compare.yaml) -> layout (the folder's runs) -> runner (trains each arm as a `pods train` process) ->
measures (on statistics and cost_model) -> render (comparison.json/.md/.png, console tables); status reads a
folder between sittings.
"""
