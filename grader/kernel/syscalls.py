"""The system calls no kernel may make: those that write another process's memory, or its
own from outside the interpreter (`ptrace`, `process_vm_writev`). The guard's record
channel and the shim live in the kernel's memory; with these refused, and `/proc`
read-only inside the sandbox (no `/proc/self/mem` write, by path or by descriptor), the
only way left to rewrite them is native code (`ctypes`), which the guard records.

A seccomp filter (classic BPF) the kernel installs on itself before it runs anything of
the notebook's (`INSTALL`, run by the cold kernel's launcher and by the forked kernel),
with no_new_privs set first, as seccomp requires of an unprivileged process. The refused
calls fail with EPERM. A system call of another architecture (the 32-bit ABI of an x86_64
kernel) is refused whole: Python never makes one. On an architecture not listed the
filter is empty and nothing is installed (docs/security.md says which are covered).
"""

from __future__ import annotations

import errno
import platform
import struct

# AUDIT_ARCH_* and the numbers of the refused calls, by machine.
ARCHITECTURES = {
    "x86_64": (0xC000003E, {"ptrace": 101, "process_vm_writev": 311}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "process_vm_writev": 271}),
}
X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers

_LD_ABS_W, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000


def program(machine: str | None = None) -> bytes:
    """The filter, as the kernel's `struct sock_filter` array; b"" on an unknown machine."""
    machine = machine or platform.machine()
    if machine not in ARCHITECTURES:
        return b""
    arch, numbers = ARCHITECTURES[machine]
    checks: list[tuple[int, int]] = [(_JEQ, n) for n in numbers.values()]
    if machine == "x86_64":
        checks.insert(0, (_JGE, X32_BIT))
    # 0: load arch; 1: not ours -> refuse; 2: load nr; checks...; allow; refuse
    count = 3 + len(checks) + 2
    refuse_at = count - 1
    code = [(_LD_ABS_W, 0, 0, 4), (_JEQ, 0, refuse_at - 2, arch), (_LD_ABS_W, 0, 0, 0)]
    for op, value in checks:
        here = len(code)
        code.append((op, refuse_at - here - 1, 0, value))
    code += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | errno.EPERM)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)


# Installs the filter given in hex (argv or a request); b"" installs nothing.
INSTALL = """
def _refuse_syscalls(hex_program):
    import ctypes
    program = bytes.fromhex(hex_program)
    if not program:
        return
    libc = ctypes.CDLL(None, use_errno=True)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    prog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(prog), 0, 0):
        raise OSError(ctypes.get_errno(), "seccomp: could not refuse ptrace")
"""
