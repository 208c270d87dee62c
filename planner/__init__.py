"""plan: a parallelism auto-planner for large-language-model training."""

__version__ = "0.1.0"
