"""Write the thin Prime-hub / Verifiers package for one environment: environments/hub/rlvr_<name>/.

    python scripts/make_hub_package.py NAME "one-line description" keyword [keyword ...]

The package re-exports `environments.<name>_env.load_environment` under the module `rlvr_<name>`
(env id `rlvr-<name>`), depends on `rlvr-envs`, and carries the hub README. Re-run after changing
the template; a README may then be extended by hand (see rlvr_math).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = """[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "rlvr-{name}"
version = "0.1.0"
description = "{description}"
keywords = [{keywords}]
requires-python = ">=3.10"
license = "Apache-2.0"
readme = "README.md"
dependencies = ["rlvr-envs>=0.1.0", "verifiers>=0.1.9.post2,<0.1.10"]

[tool.setuptools]
packages = ["rlvr_{name}"]

[tool.verifiers.eval]
num_examples = 5
rollouts_per_example = 3
"""

INIT = '''"""Prime Environments Hub / Verifiers front door for rlvr-envs' {name} environment."""

from environments.{name}_env import load_environment

__all__ = ["load_environment"]
'''

README = """# rlvr-{name}

{description}

Part of rlvr-envs: the same dataset, prompt and rubric as `python environments/{name}_env.py serve|process|evaluate`.
See the module docstring of `environments/{name}_env.py` for its rows, arguments and rubric.

Quickstart: `pip install -e environments/hub/rlvr_{name}` then
`python -c "import verifiers as vf; env = vf.load_environment('rlvr-{name}')"`.
Arguments of `load_environment(**kwargs)` are the fields of the environment's config (`--env.*` flags).
"""


def main(name: str, description: str, *keywords: str) -> None:
    pkg = ROOT / "environments" / "hub" / f"rlvr_{name}"
    (pkg / f"rlvr_{name}").mkdir(parents=True, exist_ok=True)
    kw = ", ".join(f'"{k}"' for k in keywords)
    (pkg / "pyproject.toml").write_text(PYPROJECT.format(name=name, description=description, keywords=kw))
    (pkg / f"rlvr_{name}" / "__init__.py").write_text(INIT.format(name=name))
    (pkg / "README.md").write_text(README.format(name=name, description=description))
    print(pkg)


if __name__ == "__main__":
    main(*sys.argv[1:])
