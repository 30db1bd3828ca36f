"""Prime Environments Hub / Verifiers front door for rlvr-envs' math environment."""

from environments.math_env import load_environment

__all__ = ["load_environment"]
