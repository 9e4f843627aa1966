"""Measured profiles: import a torch.profiler / Kineto trace (profile/kineto.py) into a compact artifact
(profile/artifact.py, schema npuport.profile/1) and join it to an audit's estimate (profile/join.py).
See docs/profile.md for what of issue 22 this covers and what it does not yet."""
