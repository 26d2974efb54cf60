"""The seccomp filter that keeps a sandbox without network off the host's Unix sockets.

A network namespace of its own hides the machine's TCP/IP services and abstract
Unix sockets, but a Unix socket with a path is found through the file system:
connect() reaches it wherever the sandbox sees the file (`/run/docker.sock`,
the D-Bus system bus, a database's socket), read-only mount or not. So, with no
network, bubblewrap loads this classic-BPF program (`bwrap --seccomp FD`), which
makes these system calls fail, whatever the path they would lead to:

- `socket(AF_UNIX, ...)`: EACCES;
- `socketpair(AF_UNIX, SOCK_DGRAM, ...)`: EACCES, since a datagram socket can
  send to any path (sendto); stream and seqpacket pairs, which only talk to
  each other (pipes of Python's multiprocessing and asyncio), work;
- `io_uring_setup`: EPERM, as where io_uring is turned off, since an io_uring
  operation makes sockets without a system call the filter sees;
- on 32-bit x86, `socketcall` making a socket or a pair (its arguments are in
  memory a filter cannot read), EACCES.

Every other system call runs as without the filter. agentfs knows the system
call numbers of x86-64 (with its x32 and 32-bit ABIs) and aarch64 (with 32-bit
ARM); on another machine there is no filter (`unix_socket_filter` returns None)
and the sandbox says so at start.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["MACHINES", "readable", "unix_socket_filter"]

# Classic BPF instructions (linux/filter.h) and seccomp's return values (linux/seccomp.h).
_LOAD = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = the 32-bit word at offset k of seccomp_data
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K: A &= k
_JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: skip jt instructions if A == k, else jf
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000

# Offsets in struct seccomp_data: nr, arch, then 64-bit arguments from 16 (the low
# word first: every machine here is little-endian, and domain and type are ints).
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24

_AF_UNIX = 1
_SOCK_DGRAM = 2
_SOCK_TYPE_MASK = 0xF  # type without SOCK_NONBLOCK and SOCK_CLOEXEC
_X32_BIT = 0x40000000  # x32 calls are x86-64's numbers with this bit
# socketcall(2)'s calls that make sockets
_SYS_SOCKET = 1
_SYS_SOCKETPAIR = 8
# io_uring_setup has the same number everywhere since the tables were unified
_IO_URING_SETUP = 425


@dataclass(frozen=True)
class _Abi:
    """How one ABI's programs ask the kernel for sockets."""

    arch: int  # AUDIT_ARCH_*
    socket: int
    socketpair: int
    socketcall: int | None = None
    x32: bool = False  # x86-64 also runs x32 programs under its own AUDIT_ARCH


_X86_64 = _Abi(0xC000003E, socket=41, socketpair=53, x32=True)
_I386 = _Abi(0x40000003, socket=359, socketpair=360, socketcall=102)
_AARCH64 = _Abi(0xC00000B7, socket=198, socketpair=199)
_ARM = _Abi(0x40000028, socket=281, socketpair=288)

#: Each machine (`platform.machine()`) and the ABIs its kernel may run programs in.
MACHINES = {"x86_64": (_X86_64, _I386), "aarch64": (_AARCH64, _ARM)}

_Op = tuple[int, int | str, int | str, int] | str  # an instruction, or a label


@functools.cache
def unix_socket_filter(machine: str) -> bytes | None:
    """The filter for `machine`, as bwrap reads it (struct sock_filter, one after the
    other), or None where agentfs does not know the machine's system calls."""
    abis = MACHINES.get(machine)
    if abis is None:
        return None
    ops: list[_Op] = []
    for number, abi in enumerate(abis):
        ops += [(_LOAD, 0, 0, _ARCH), (_JUMP_IF_EQUAL, 0, f"abi{number + 1}", abi.arch)]
        ops += _abi_checks(abi, f"abi{number}")
        ops.append(f"abi{number + 1}")
    ops += [(_RETURN, 0, 0, _KILL_PROCESS),  # an ABI not listed: none can run here
            "allow", (_RETURN, 0, 0, _ALLOW),
            "refuse", (_RETURN, 0, 0, _ERRNO | errno.EACCES),
            "no io_uring", (_RETURN, 0, 0, _ERRNO | errno.EPERM)]
    return _assemble(ops)


def _abi_checks(abi: _Abi, name: str) -> list[_Op]:
    """What follows once the arch is `abi`'s: the system call and its arguments."""
    ops: list[_Op] = [(_LOAD, 0, 0, _NR)]
    if abi.x32:
        ops.append((_AND, 0, 0, ~_X32_BIT & 0xFFFFFFFF))
    ops += [(_JUMP_IF_EQUAL, f"{name} socket", 0, abi.socket),
            (_JUMP_IF_EQUAL, f"{name} pair", 0, abi.socketpair),
            (_JUMP_IF_EQUAL, "no io_uring", 0, _IO_URING_SETUP)]
    if abi.socketcall is not None:
        ops.append((_JUMP_IF_EQUAL, f"{name} socketcall", 0, abi.socketcall))
    ops += [(_RETURN, 0, 0, _ALLOW),
            f"{name} socket", (_LOAD, 0, 0, _ARG0),
            (_JUMP_IF_EQUAL, "refuse", "allow", _AF_UNIX),
            f"{name} pair", (_LOAD, 0, 0, _ARG0),
            (_JUMP_IF_EQUAL, 0, "allow", _AF_UNIX),
            (_LOAD, 0, 0, _ARG1), (_AND, 0, 0, _SOCK_TYPE_MASK),
            (_JUMP_IF_EQUAL, "refuse", "allow", _SOCK_DGRAM)]
    if abi.socketcall is not None:
        ops += [f"{name} socketcall", (_LOAD, 0, 0, _ARG0),
                (_JUMP_IF_EQUAL, "refuse", 0, _SYS_SOCKET),
                (_JUMP_IF_EQUAL, "refuse", "allow", _SYS_SOCKETPAIR)]
    return ops


def _assemble(ops: list[_Op]) -> bytes:
    """The program, with each jump to a label turned into how many instructions it skips."""
    at: dict[str, int] = {}
    program: list[tuple[int, int | str, int | str, int]] = []
    for op in ops:
        if isinstance(op, str):
            at[op] = len(program)
        else:
            program.append(op)

    def offset(target: int | str, index: int) -> int:
        return target if isinstance(target, int) else at[target] - index - 1

    return b"".join(struct.pack("=HBBI", code, offset(jt, i), offset(jf, i), k)
                    for i, (code, jt, jf, k) in enumerate(program))


@contextlib.contextmanager
def readable(program: bytes | None) -> Iterator[int | None]:
    """A descriptor to read `program` from once, as `bwrap --seccomp` does (the read
    end of a pipe holding it), closed when the block ends; None without a program."""
    if program is None:
        yield None
        return
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb") as pipe:  # a few hundred bytes: within a pipe's buffer
            pipe.write(program)
        yield read
    finally:
        os.close(read)
