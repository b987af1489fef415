"""`--memory-limit` as a cap on what the kernel holds: a memory cgroup of its own, where
one can be made.

A kernel's address-space cap (RLIMIT_AS) counts what torch's libraries map, not what the
notebook holds, and each process the kernel starts gets its own. Where the grader may
make a memory cgroup (cgroup v1's memory controller, or cgroup v2's where it is enabled
for the grader's own group, as root on this project's CI machine), each kernel runs in one
whose limit is `--memory-limit`: its resident memory, every process it starts, and the
pages it writes into the sandbox's RAM-backed `/tmp` are counted together; past the
limit the kernel is killed (the test is `crashed`). The address-space cap stays on the
CPU as well, so one allocation past the limit still fails at once with
`memory limit exceeded` (on a GPU, where CUDA needs the address space, the cgroup alone
caps the host memory).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path


def _own_group() -> tuple[Path, str] | None:
    """(the folder of this process's memory cgroup, the limit file's name), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (folder / "memory.limit_in_bytes").exists():
                return folder, "memory.limit_in_bytes"
    for line in lines:
        if line.startswith("0::"):
            for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                folder = mount / line[3:].lstrip("/")
                if "memory" in _read(folder / "cgroup.subtree_control").split():
                    return folder, "memory.max"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def make_group(name: str, limit: int | None) -> Path | None:
    """A fresh memory cgroup `name` below the grader's own, capped at `limit` bytes (swap
    included where the kernel counts it); None when there is no limit or none can be made
    here (then the address-space cap alone applies)."""
    if not limit:
        return None
    found = _own_group()
    if found is None:
        return None
    parent, limit_file = found
    folder = parent / name
    try:
        folder.mkdir()
    except OSError:
        return None
    try:
        (folder / limit_file).write_text(str(limit))
        swap = folder / "memory.memsw.limit_in_bytes"
        if swap.exists():
            with contextlib.suppress(OSError):
                swap.write_text(str(limit))
    except OSError:
        remove_group(folder)
        return None
    return folder


def remove_group(group: Path | None, wait: float = 2.0) -> None:
    """Remove the cgroup once its processes are gone (they were killed just before)."""
    if group is None:
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def available() -> bool:
    """Whether a kernel's memory cgroup can be made here."""
    import os

    group = make_group(f"grader-probe-{os.getpid()}", 1 << 30)
    remove_group(group)
    return group is not None
