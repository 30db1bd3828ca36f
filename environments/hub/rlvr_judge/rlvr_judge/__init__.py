"""Prime Environments Hub / Verifiers front door for rlvr-envs' judge environment."""

from environments.judge_env import load_environment

__all__ = ["load_environment"]
