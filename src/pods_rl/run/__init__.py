"""Running PODS as a tool: settings, the training run with its monitor, reports and comparisons."""
