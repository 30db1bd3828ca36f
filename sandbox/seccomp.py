"""A small seccomp-bpf deny list for the sandboxes: bubblewrap loads it (`bwrap --seccomp FD`); the
Docker worker installs it on itself, on top of Docker's default profile (`_worker._add_filter`).

Denied with EPERM: kernel keyrings (`add_key`, `request_key`, `keyctl`: the user keyring outlives a
job and would carry data to the next job in the same warm worker), `bpf`, `perf_event_open`,
`userfaultfd`, `io_uring_*`, file-handle and kexec calls: kernel attack surface a test solution
never needs; `ptrace`, `process_vm_readv/writev` and `pidfd_getfd`: reading or writing another
process's memory or descriptors (the harness's pass tokens), whatever its dumpable flag.

Allowed on the calling process only (EPERM when aimed at any other): the calls that change another
process's rlimits (`prlimit64`), nice value (`setpriority`), CPU affinity, scheduling policy
(`sched_set*`) or I/O priority (`ioprio_set`). A process of the same uid may do that to any other
without a capability, and a warm worker's children inherit what it has: a job lowering the
worker's limits or priority would make the next jobs on that worker fail or time out. The libc calls
for one's own process pass 0 (`setrlimit`, `nice`, `os.sched_setaffinity(0, ...)`).

System calls of a foreign ABI (i386 `int 0x80`, x32) kill the process, so the list cannot be
sidestepped. Everything else is allowed; capabilities are already all dropped. Unknown
architectures get no filter (`program()` returns None) and the sandbox says so.
"""

from __future__ import annotations

import errno
import platform
import struct


def _arg(index: int, value: int) -> tuple[int, int]:
    """Argument `index` (as the kernel reads a pid or a "which": its low 32 bits) equals `value`."""
    return 16 + 8 * index, value  # struct seccomp_data: nr, arch, ip, then 6 u64 args (low word first)


def _null(index: int) -> tuple[tuple[int, int], ...]:
    """Pointer argument `index` is NULL (both 32-bit words are 0)."""
    return (16 + 8 * index, 0), (20 + 8 * index, 0)


# Calls allowed only in these forms (alternatives, each a set of (offset, value) that must all hold);
# their numbers per architecture are in `_ARCHES`.
_SELF_ONLY = {
    "prlimit64": ((_arg(0, 0),), _null(2)),  # one's own limits; or only reading another's
    "setpriority": ((_arg(0, 0), _arg(1, 0)),),  # PRIO_PROCESS, who = 0
    "sched_setparam": ((_arg(0, 0),),),
    "sched_setscheduler": ((_arg(0, 0),),),
    "sched_setaffinity": ((_arg(0, 0),),),
    "sched_setattr": ((_arg(0, 0),),),
    "ioprio_set": ((_arg(0, 1), _arg(1, 0)),),  # IOPRIO_WHO_PROCESS, who = 0
}

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000

_ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "name_to_handle_at": 303,
            "open_by_handle_at": 304,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
        },
        {  # self-only (`_SELF_ONLY`)
            "prlimit64": 302,
            "setpriority": 141,
            "sched_setparam": 142,
            "sched_setscheduler": 144,
            "sched_setaffinity": 203,
            "sched_setattr": 314,
            "ioprio_set": 251,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "name_to_handle_at": 264,
            "open_by_handle_at": 265,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
        },
        {  # self-only (`_SELF_ONLY`)
            "prlimit64": 261,
            "setpriority": 140,
            "sched_setparam": 118,
            "sched_setscheduler": 119,
            "sched_setaffinity": 122,
            "sched_setattr": 274,
            "ioprio_set": 30,
        },
    ),
}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The compiled filter (array of `struct sock_filter`) for this machine, or None if unsupported."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    audit_arch, denied, self_only = _ARCHES[machine]
    deny = _RET_ERRNO | errno.EPERM
    out = [
        _ins(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _ins(_JEQ_K, 1, 0, audit_arch),
        _ins(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _ins(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        out += [_ins(_JGE_K, 0, 1, _X32_BIT), _ins(_RET_K, 0, 0, _RET_KILL_PROCESS)]
    for nr in sorted(denied.values()):
        out += [_ins(_JEQ_K, 0, 1, nr), _ins(_RET_K, 0, 0, deny)]
    for name, nr in sorted(self_only.items()):
        out += _self_only(nr, _SELF_ONLY[name], deny)
    out.append(_ins(_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(out)


def _self_only(nr: int, forms: tuple[tuple[tuple[int, int], ...], ...], deny: int) -> list[bytes]:
    """Instructions (the accumulator holds the syscall number): for `nr`, allow if one of `forms`
    holds (every (offset, value) of it), else deny; any other call falls through to what follows."""
    body: list[bytes] = [_ins(_RET_K, 0, 0, deny)]
    for form in reversed(forms):  # built back to front: a failed check jumps to the next form
        block: list[bytes] = [_ins(_RET_K, 0, 0, _RET_ALLOW)]
        for offset, value in reversed(form):
            block = [_ins(_LD_W_ABS, 0, 0, offset), _ins(_JEQ_K, 0, len(block), value), *block]
        body = block + body
    return [_ins(_JEQ_K, 0, len(body), nr), *body]
