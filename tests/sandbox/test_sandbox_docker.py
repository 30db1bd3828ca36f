"""The Docker warm-pool backend under the same contract and escape suites as bubblewrap.

The test functions are imported from the bwrap modules; the `sb` / `pool` fixtures below override
the bwrap ones for this module, so each case runs against DockerSandbox.
Needs a Docker engine and the local image (scripts/ci_host_setup.sh).
"""

from __future__ import annotations

import socket

import pytest
from sandbox_helpers import assert_healthy, py
from test_sandbox_basic import (  # noqa: F401
    test_async_run_concurrent_jobs,
    test_bad_file_path_rejected,
    test_channel_fd_is_private_pipe,
    test_files_dirs_and_cwd,
    test_limits_are_per_job,
    test_non_python_command,
    test_python_c_and_module_forms,
    test_scrubbed_environment_plus_job_env,
    test_stdin_stdout_exit_code,
    test_uncaught_exception_is_exit_1_with_traceback,
)
from test_sandbox_escape import (  # noqa: F401
    listener,
    test_bounded_fork_bomb_is_capped_by_pids,
    test_cannot_signal_host_processes,
    test_cpu_limit,
    test_cpu_spin_killed_at_wall_limit,
    test_disk_fill_scratch_capped,
    test_env_secrets_and_host_environ_unreadable,
    test_file_size_limit,
    test_foreign_abi_syscalls_are_killed,
    test_host_files_invisible_and_unwritable,
    test_identity_no_caps_no_new_privs_unprivileged_uid,
    test_jobs_cannot_see_each_other,
    test_kernel_keyring_cannot_carry_data_between_jobs,
    test_memory_bomb,
    test_network_host_loopback_unreachable_and_only_lo,
    test_no_background_process_survives,
    test_no_syscall_changes_another_process_limits_or_scheduling,
    test_no_syscall_reaches_another_process_memory,
    test_output_flood_capped,
    test_proc_snooping,
    test_stderr_and_channel_floods_capped,
    test_symlink_tricks,
)
from test_sandbox_pool import (  # noqa: F401
    test_a_job_cannot_change_what_the_next_job_inherits,
    test_limit_hit_recycles_and_next_job_is_correct,
    test_no_state_leaks_between_jobs,
    test_sysv_ipc_left_behind_recycles_worker,
    test_worker_survives_kill_and_ptrace_attempts,
)

from sandbox import SandboxError, SandboxUnavailable
from sandbox.docker import LABEL, OWNER_LABEL, DockerConfig, DockerSandbox, sweep_containers

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def _docker(slots: int) -> DockerSandbox:
    try:
        return DockerSandbox(DockerConfig(slots=slots))
    except SandboxUnavailable as e:
        pytest.skip(f"docker backend unavailable: {e}")


@pytest.fixture(scope="module")
def sb():
    box = _docker(2)
    yield box
    box.close_sync()


@pytest.fixture(scope="module")
def pool():
    box = _docker(1)
    yield box
    box.close_sync()


def _ours(box) -> list:
    return box.client.containers.list(
        all=True, filters={"label": f"{OWNER_LABEL}={socket.gethostname()}:{__import__('os').getpid()}"}
    )


def test_wedged_container_is_replaced(pool):
    assert_healthy(pool)
    worker = pool._workers[0]
    starts = pool.stats["worker_starts"]
    worker.container.kill()  # the container dies between jobs
    assert_healthy(pool)
    assert pool.stats["worker_starts"] == starts + 1


def test_close_removes_every_container_and_sweep_finds_orphans():
    box = _docker(2)
    box.run_sync(py("print(1)"))
    assert len(_ours(box)) >= 1
    client = box.client
    box.close_sync()
    assert _ours(box) == []
    # a container left by a crashed owner (dead pid on this host) is swept
    orphan = client.containers.create(
        "rlvr-sandbox:local",
        ["/usr/bin/true"],
        labels={LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:999999"},
    )
    assert sweep_containers(client) >= 1
    assert orphan.id not in [c.id for c in client.containers.list(all=True, filters={"label": LABEL})]


def test_no_job_runs_where_the_filter_cannot_be_installed():
    """The worker adds the seccomp filter to Docker's profile before it reports ready; one it cannot
    install (here: not a BPF program) stops it: no container runs jobs without the filter."""
    box = _docker(1)
    try:
        box.filter_hex = "00"  # one byte: the kernel refuses a program that is not whole instructions
        for w in box._workers:  # the construction probe's worker started with the real filter
            with w.lock:
                w.stop()
        with pytest.raises(SandboxError, match="cannot install the seccomp filter"):
            box.run_sync(py("print(1)"))
    finally:
        box.close_sync()


def test_a_container_pool_without_the_seccomp_filter_says_so(monkeypatch):
    from sandbox import seccomp

    box = _docker(1)
    box.close_sync()
    assert "seccomp" not in box.describe()
    monkeypatch.setattr(seccomp, "program", lambda: None)
    box = _docker(1)
    box.close_sync()
    assert "no seccomp filter" in box.describe()
