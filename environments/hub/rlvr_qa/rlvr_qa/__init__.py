"""Prime Environments Hub / Verifiers front door for rlvr-envs' QA environment."""

from environments.qa_env import load_environment

__all__ = ["load_environment"]
