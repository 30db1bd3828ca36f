"""Verifiers: front doors for our environments and a bridge that runs any Verifiers env in Atropos.

  compat.py             which Verifiers API this interpreter has (the one place that decides)
  classic_front.py      `load_environment()`: a Task as a classic `SingleTurnEnv` (0.1.9.post2 .. 0.3.x)
  classic_multiturn.py  `load_environment()` for a MultiTurnTask; classic_tools.py tool definitions
  classic_tool_env.py   `load_environment()` for a ToolTask (math_python): its tools, run by env_step
  v1_front.py           a Task as a `verifiers.v1` Taskset (0.3.1 .. 0.4.x)
  dispatch.py           which bridge runs a Verifiers id (classic or v1)
  v1_env.py             a v1 Taskset inside Atropos; v1_endpoint.py the loopback chat endpoint that
                        records the exact tokens of every turn
  tool_calls.py         tool calls in sampled text, read with the serving stack's parser family

The classic bridge is the script `environments/verifiers_env.py`. Depends on the runtime
(`environments/atropos_runtime/`), never the other way round. (Named so that it never shadows the
`verifiers` package when a script runs as `python environments/<name>_env.py`.)
"""
