"""`Limits`: the bounds on one grading, and the command line's defaults (a light module:
the CLI reads it without loading Jupyter or torch)."""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
MiB = 1024**2
GiB = 1024**3
NO_LIMIT = 1 << 62  # an output budget no kernel reaches


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
    sandbox: bool = False
    device: str = "cpu"  # where the candidate's module and inputs live during calls
    profile: bool = False  # time and measure the forward pass after the suite (`--profile`)

    @property
    def output_budget(self) -> tuple[int, int]:
        """Output kept per cell and in all, in characters (no limit: a budget never reached)."""
        cell, total = self.cell_output_bytes, self.total_output_bytes
        return (NO_LIMIT if cell is None else cell, NO_LIMIT if total is None else total)
