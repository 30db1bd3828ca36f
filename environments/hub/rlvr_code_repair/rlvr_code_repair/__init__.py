"""Prime Environments Hub / Verifiers front door for rlvr-envs' code_repair environment."""

from environments.code_repair_env import load_environment

__all__ = ["load_environment"]
