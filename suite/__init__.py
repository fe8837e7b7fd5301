"""rl-suite: seeded, recorded, resumable benchmark trials for policy-optimisation RL."""

__version__ = "0.1.0"
