"""Prime Environments Hub / Verifiers front door for rlvr-envs' code environment."""

from environments.code_env import load_environment

__all__ = ["load_environment"]
