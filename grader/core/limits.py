"""`Limits`: the bounds on one grading, and the command line's defaults (a light module:
the CLI reads it without loading Jupyter or torch)."""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
MiB = 1024**2
GiB = 1024**3
NO_LIMIT = 1 << 62  # an output budget no kernel reaches
# The smallest --memory-limit: the cap is the kernel's address space, and a kernel that
# has imported torch maps about 1.5 GiB of it before the notebook allocates anything.
MIN_MEMORY_BYTES = 2 * GiB


@dataclass(frozen=True)
class Limits:
    """Bounds on what the candidate's code may use. Times are seconds; a size of None is
    no limit. These defaults are the command line's."""

    cell_timeout: float = 60.0
    call_timeout: float = 20.0
    total_timeout: float = 900.0
    startup_timeout: float = 60.0
    memory_bytes: int | None = 8 * GiB
    cell_output_bytes: int | None = 64 * KiB
    total_output_bytes: int | None = 16 * 64 * KiB
    max_timeouts: int = 3
    sandbox: bool | None = None  # None: sandboxed wherever bubblewrap works (see sandbox)
    device: str = "cpu"  # where the candidate's module and inputs live during calls
    profile: bool = False  # time and measure the forward pass after the suite (`--profile`)
    # `--reveal N`: the levels the candidate's report shows in full. Every test the
    # candidate may see (public ones, and those levels) runs before any hidden one, so no
    # message on the candidate's card can carry what a hidden test sent.
    reveal: int | None = None
    # `--kernel-user USER`: when the grader runs as root, the kernel runs as this user
    # (the Gradescope autograder's `grader-kernel`), which cannot read the autograder's
    # source nor write its scripts or results.
    kernel_user: str | None = None
    # Fork each kernel from a warm template (grader/kernel/template.py) wherever that is as
    # safe as a cold start; `--cold`: always boot a fresh interpreter.
    warm: bool = True

    @property
    def address_space_cap(self) -> int | None:
        """The kernel's address-space cap: `memory_bytes`, except on a GPU, where CUDA
        reserves address space for the whole device when it starts (an 8G cap makes
        cudaGetDeviceCount fail): there the kernel's host memory is not capped."""
        return None if self.device.startswith("cuda") else self.memory_bytes

    @property
    def output_budget(self) -> tuple[int, int]:
        """Output kept per cell and in all, in characters (no limit: a budget never reached)."""
        cell, total = self.cell_output_bytes, self.total_output_bytes
        return (NO_LIMIT if cell is None else cell, NO_LIMIT if total is None else total)
