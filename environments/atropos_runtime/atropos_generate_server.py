"""Run atroposlib's archived custom vLLM server (`example_trainer/vllm_api_server.py`, `/generate`) on vLLM 0.32.

The file targets an older vLLM: some modules moved and EngineArgs now defines `--log-level` itself.
This launcher registers the old import paths as aliases and lets argparse resolve the duplicated
option, then executes the unmodified atroposlib file *as this `__main__`*, so the engine processes
that multiprocessing spawns re-import this launcher (with the aliases) rather than the raw file.

    python -m environments.atropos_runtime.atropos_generate_server --model PATH --host 127.0.0.1 --port 9002 ...
"""

from __future__ import annotations

import sys
import types


def install_compat_aliases() -> None:
    import vllm.utils as vllm_utils
    from vllm.entrypoints.launchers import launcher
    from vllm.entrypoints.serve.utils import api_utils
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.utils.system_utils import set_ulimit

    class ResolvingParser(FlexibleArgumentParser):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("conflict_handler", "resolve")
            super().__init__(*args, **kwargs)

    vllm_utils.FlexibleArgumentParser = ResolvingParser
    vllm_utils.set_ulimit = set_ulimit
    sys.modules["vllm.entrypoints.launcher"] = launcher
    legacy = types.ModuleType("vllm.entrypoints.utils")
    legacy.with_cancellation = api_utils.with_cancellation
    sys.modules["vllm.entrypoints.utils"] = legacy


install_compat_aliases()

if __name__ == "__main__":
    import example_trainer

    _path = example_trainer.__path__[0] + "/vllm_api_server.py"
    with open(_path, encoding="utf-8") as _f:
        exec(compile(_f.read(), _path, "exec"), globals())  # noqa: S102 - atroposlib's own server file
