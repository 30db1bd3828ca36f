"""Environments: what the policy sees and does.

Three parts:
* here, the environments themselves (`<name>_env.py`: run as `python environments/<name>_env.py
  serve|process|evaluate`, or copy one to write your own), `task.py` (what an environment defines),
  `data_sources.py`, `data/` and the hub packages `rlvr_<name>/`;
* `atropos_runtime/`: the Atropos runtime that turns a Task into training groups;
* `vf_bridge/`: Verifiers front doors (`load_environment`, v1 Tasksets) and the Verifiers bridge.
"""

from environments.atropos_runtime.lazy_imports import install as _install_lazy_imports

_install_lazy_imports()  # before anything imports atroposlib: see atropos_runtime/lazy_imports.py
