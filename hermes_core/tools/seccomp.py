"""A seccomp filter that keeps sandboxed commands out of new user namespaces.

Inside a user namespace of its own a process is "root" there: it can mount, make network
namespaces and reach kernel code that unprivileged processes never reach, which is where
most container escapes begin. The sandbox needs none of that, so this filter (loaded by
bubblewrap with ``--seccomp``) refuses, with ``EPERM``:

- ``unshare`` and ``clone`` asking for ``CLONE_NEWUSER``;
- ``clone3`` (its flags sit in memory a filter cannot read) with ``ENOSYS``, which makes the C
  library fall back to ``clone``;
- any system call of another ABI (i386 or x32 numbering on x86-64), which would dodge the
  checks above.

Everything else is allowed. The program is classic BPF over ``struct seccomp_data``
(``nr`` at offset 0, ``arch`` at 4, the arguments from 16, little-endian), assembled here:
it is a dozen instructions.
"""

from __future__ import annotations

import errno
import platform
import struct

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000

# Per machine: (AUDIT_ARCH_*, unshare, clone, clone3).
_ABIS = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}


class SeccompUnsupported(RuntimeError):
    """No filter is known for this machine's architecture."""


def supported(machine: str | None = None) -> bool:
    """Whether this machine's architecture has a filter here."""
    return (machine or platform.machine()) in _ABIS


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def no_user_namespaces_filter(machine: str | None = None) -> bytes:
    """The filter program, as ``struct sock_filter`` array bytes for ``bwrap --seccomp``."""
    machine = machine or platform.machine()
    if machine not in _ABIS:
        raise SeccompUnsupported(f"no seccomp filter for {machine}")
    arch, unshare, clone, clone3 = _ABIS[machine]
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    # Jump offsets count instructions after the jump; the returns sit at the end:
    # 10: ALLOW, 11: EPERM, 12: ENOSYS.
    program = [
        _op(_LD_W_ABS, 4),  # 0: arch
        _op(_JEQ_K, arch, 0, 10),  # 1: another ABI -> ENOSYS
        _op(_LD_W_ABS, 0),  # 2: nr
        _op(_JGE_K, _X32_BIT, 8, 0),  # 3: x32 numbering -> ENOSYS
        _op(_JEQ_K, clone3, 7, 0),  # 4: clone3 -> ENOSYS
        _op(_JEQ_K, unshare, 1, 0),  # 5: unshare -> check its flags
        _op(_JEQ_K, clone, 0, 3),  # 6: clone -> check its flags; else ALLOW
        _op(_LD_W_ABS, 16),  # 7: the flags (low half of the first argument)
        _op(_JSET_K, CLONE_NEWUSER, 2, 0),  # 8: a new user namespace -> EPERM
        _op(_RET_K, _ALLOW),  # 9
        _op(_RET_K, _ALLOW),  # 10
        _op(_RET_K, eperm),  # 11
        _op(_RET_K, enosys),  # 12
    ]
    return b"".join(program)
