"""The trusted test harness that runs INSIDE the sandbox (stdlib only, Python >= 3.9).

Two ways in: `python3 run.py` as its own job (`main()`), or `run_spec()` called by a warm pool's
worker that has this package pre-imported (`sandbox.harness`): same children, same records.
Modules: `supervisor` (the harness process: limits, records), `child` (one forked test child),
`guards` (what a child may not do: audit events, paths, the descriptor filter), `snapshot` (what a
session may not change), `wire` (values and frames that cross a pipe; the job's file names).

Usage (inside a job): `python3 run.py` in a directory holding `spec.json` and this package as
`rlvr_runner/`; the job must have the result channel (`Job.channel=True`, file descriptor 3).
Nothing on stdout/stderr is ever trusted. `sandbox.harness` ships the package (`RUNNER_MODULES`: the
one list of what the sandbox needs), an unchecked-hash .pyc of each module and a 4-line `run.py`
that imports it and calls `main()`, so the sandbox's interpreter does not recompile it for every job.

Spec (JSON): `{"version": 1, "setup": str, "code": str, "entry_point": str|null, "tests": [...],
"time_limit_s": float, "wall_factor": float, "memory_mb": int, "stop_on_error": bool}`. A test is
one of
  * `{"kind": "stdio", "input": str, "max_output": int}`: the solution runs as `__main__` with that
    stdin; its stdout goes back to the host, which compares it (expected outputs never enter here);
  * `{"kind": "call", "calls": [expr, ...], "args": [...]|null}`: each expression (e.g. `f(1, 2)`) is
    evaluated in the solution's namespace (`__rlvr_args__` holds the decoded `args`); the values go
    back as exact-builtin-type JSON and the host checks them (expected values never enter here);
  * `{"kind": "assert", "code": str}`: in-process test code (HumanEval `check`). Best effort: the
    verdict is a per-test nonce-framed record written by the child only after the code returned.

Children. A stdio test gets its own child (the solution runs as `__main__` with that stdin). All
consecutive call/assert tests share one "session" child: setup + solution once, then the tests in
order, one message each; after a timeout or crash the next test gets a fresh child. Each child
closes the channel (and every other descriptor), moves to its own process group, sets rlimits
(address space; CPU as a backstop), installs a seccomp filter that keeps descriptors 0-2 and the
result pipe in place whatever the code calls (`fd_filter`; a `dup2` onto them is SIGSYS → hack),
installs an audit hook (signals to any process, process creation, opening the harness's own files
such as the spec → hack in every format; frame/heap/ctypes access, tracing, code replacement, paths
into /proc → hack in sessions; sessions also verify an identity
snapshot of every loaded module, see `snapshot._Snapshot` and `child._child`) and talks to the harness over a private pipe in frames
`len(4) nonce(16) tag(1) index(4) cpu(8) body`. The harness validates the frames and enforces the
time limit as CPU time: it reads the child's CPU from /proc every 50 ms and kills it once the
current test has used more than `time_limit_s` (also checked from the frame and rusage), with a
wall deadline of `time_limit_s * wall_factor + 0.5` as a safety net (moved by the time the child
waited for a CPU: a busy machine does not turn a check into a timeout) and RLIMIT_CPU as a backstop.
It writes one framed record per test to the channel: `len(4) + JSON`. Record types: `hello`,
`result`, `done`. Every test runs, except after a `hack` or `internal` record and, with
`stop_on_error`, after the first record whose outcome is not `ok`: a wrong answer is `ok` here (the
host judges stdio and call tests), so it never stops the run.

Result outcomes: `ok` (ran to completion; stdio/call verdicts are decided on the host), `error`
(exception, non-zero exit, fatal signal), `timeout`, `memory`, `output` (stdout over its cap),
`invalid` (returned a non-builtin value), `hack` (detector hit; also a session child that exited
before its tests finished, and any child that ended by a signal no fault or limit sends, or stopped:
only the child itself can have done it), `internal` (harness failure).
"""

from .supervisor import main, reset, run_spec, supervise
from .wire import CHANNEL_FD, NotBuiltin, check_builtin, encode, take_messages

__all__ = [
    "CHANNEL_FD",
    "NotBuiltin",
    "check_builtin",
    "encode",
    "main",
    "reset",
    "run_spec",
    "supervise",
    "take_messages",
]
