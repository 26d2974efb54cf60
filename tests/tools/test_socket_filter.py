"""The socket filter's program, run by a small classic-BPF interpreter for every ABI it
knows, including those this machine cannot run (tests/tools/test_sandbox_network.py
runs it in the real sandbox)."""

from __future__ import annotations

import errno
import struct

import pytest

from agentfs.tools.socket_filter import MACHINES, unix_socket_filter

ALLOW, KILL = 0x7FFF0000, 0x80000000
AF_UNIX, AF_INET, SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 1, 2, 5
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
X32 = 0x40000000


def run(program: bytes, arch: int, nr: int, *args: int) -> int:
    """What seccomp answers for the system call `nr` of `arch` with `args`."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    ops = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    a, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:
            a = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:
            a &= k
        elif code == 0x15:
            pc += jt if a == k else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_only_unix_sockets_that_can_reach_a_path_and_io_uring_are_refused(machine):
    program = unix_socket_filter(machine)
    assert program is not None and len(program) % 8 == 0
    refused, no_io_uring = 0x50000 | errno.EACCES, 0x50000 | errno.EPERM
    for abi in MACHINES[machine]:
        for nr in [abi.socket, abi.socket | X32] if abi.x32 else [abi.socket]:
            assert run(program, abi.arch, nr, AF_UNIX, SOCK_STREAM) == refused
            assert run(program, abi.arch, nr, AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK) == refused
            assert run(program, abi.arch, nr, AF_INET, SOCK_STREAM) == ALLOW
        pair = abi.socketpair
        assert run(program, abi.arch, pair, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC) == ALLOW
        assert run(program, abi.arch, pair, AF_UNIX, SOCK_SEQPACKET) == ALLOW
        assert run(program, abi.arch, pair, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC) == refused
        assert run(program, abi.arch, 425, 8, 0) == no_io_uring
        if abi.socketcall is not None:  # socket() and socketpair() through socketcall
            assert run(program, abi.arch, abi.socketcall, 1, 0) == refused
            assert run(program, abi.arch, abi.socketcall, 8, 0) == refused
            assert run(program, abi.arch, abi.socketcall, 3, 0) == ALLOW  # connect
        assert run(program, abi.arch, 0, AF_UNIX, SOCK_DGRAM) == ALLOW  # any other call
        assert run(program, abi.arch, abi.socket + 2, AF_UNIX, SOCK_DGRAM) == ALLOW
    assert run(program, 0xC00000F3, 198, AF_UNIX, SOCK_STREAM) == KILL  # an ABI not listed


def test_a_machine_agentfs_does_not_know_has_no_filter():
    assert unix_socket_filter("riscv64") is None
    assert unix_socket_filter("") is None
