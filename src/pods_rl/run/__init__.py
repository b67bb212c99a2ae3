"""The training run: settings, folders, the run with its monitor, logs and report (comparisons: `pods_rl.compare`)."""
