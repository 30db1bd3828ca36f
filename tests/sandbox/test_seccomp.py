"""The seccomp program itself, run by a small classic-BPF interpreter over `struct seccomp_data`
(the escape suite runs the same calls for real in the sandbox)."""

from __future__ import annotations

import errno
import struct

import pytest

from sandbox.seccomp import _ARCHES, program

ALLOW, KILL, EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM


def run_filter(prog: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """The action `prog` returns for one system call (only the opcodes `program` emits)."""
    args = (*args, *(0,) * (6 - len(args)))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(a & (2**64 - 1) for a in args))
    ins = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif code in (0x15, 0x35):  # jeq / jge #k
            pc += jt if (acc == k if code == 0x15 else acc >= k) else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("machine", sorted(_ARCHES))
def test_calls_on_other_processes_are_denied_and_on_self_allowed(machine):
    prog, (arch, _, nrs) = program(machine), _ARCHES[machine]
    other, buf = 1, 0x7FFF00001000

    def action(name, *args):
        return run_filter(prog, arch, nrs[name], args)

    assert action("prlimit64", 0, 7, buf, buf) == ALLOW  # setrlimit / getrlimit
    assert action("prlimit64", other, 7, 0, buf) == ALLOW  # only reading another's
    assert action("prlimit64", other, 7, buf, 0) == EPERM
    assert action("prlimit64", other, 7, 0x7FFF00000000, 0) == EPERM  # low word 0 is not NULL
    assert action("prlimit64", 1 << 32, 7, buf, 0) == ALLOW  # the kernel reads pid 0: itself
    assert action("setpriority", 0, 0, 10) == ALLOW  # nice()
    for which, who in ((0, other), (1, 0), (2, 0), (2, other)):  # PRIO_PROCESS/PGRP/USER
        assert action("setpriority", which, who, 19) == EPERM
    for name in ("sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr"):
        assert action(name, 0, 0, buf) == ALLOW
        assert action(name, other, 0, buf) == EPERM
    assert action("ioprio_set", 1, 0, 7) == ALLOW
    for which, who in ((1, other), (0, 0), (2, 0), (3, 0)):
        assert action("ioprio_set", which, who, 7) == EPERM


@pytest.mark.parametrize("machine", sorted(_ARCHES))
def test_denied_killed_and_plain_calls(machine):
    prog, (arch, denied, _) = program(machine), _ARCHES[machine]
    for nr in denied.values():
        assert run_filter(prog, arch, nr, (1, 2, 3)) == EPERM
    assert run_filter(prog, arch, 0, (1, 2, 3)) == ALLOW  # read / io_setup: not on any list
    assert run_filter(prog, arch ^ 1, 0) == KILL  # a foreign ABI
    if machine == "x86_64":
        assert run_filter(prog, arch, 0x40000000 | 39) == KILL  # x32
