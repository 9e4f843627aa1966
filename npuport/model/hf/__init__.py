"""Hugging Face models as the audit needs them: built from a config alone on fake tensors, their scenario inputs and
own caches, the real-path guards, and the zoo of every causal-LM type for sweeps."""
