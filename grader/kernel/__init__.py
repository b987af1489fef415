"""The kernel layer: everything that talks to the candidate's kernel.

- `session`: one grading's kernel and every decision about it (deadline, watchdog,
  recovery: interrupt, restart, replay; restarts are counted there and only there);
- `process`: one kernel process driven by nbclient, which runs code and reports;
- `cells`: what one execution gave (`Execution`, `CellRun`) and the output bounds;
- `channel`: the call channel, two pipes per kernel (`Request`, `Answer`, frames, deadlines);
- `wire`: the payload format of the call channel (plain data and raw tensors, bounded);
- `launch`: the kernel's command, environment, import path and guard configuration, and
  whether it forks from the warm template (light: no Jupyter);
- `manager`: the kernel as jupyter_client sees it (its kernelspec, manager, and the
  provisioner of a forked kernel);
- `template`: the warm template kernels are forked from (`zygote.py` is its program,
  sent to a fresh interpreter as source text);
- `processes`: finding and killing every process a kernel started;
- `sandbox`: bubblewrap, for `--sandbox` and the PID namespace of every kernel;
- `guard`, `shim`: the code that runs inside the kernel (sent there as source text, with
  `wire`'s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.kernel.cells import CellRun
    from grader.kernel.session import Session

__all__ = ["CellRun", "Session"]


def __getattr__(name: str) -> Any:
    """`Session` and `CellRun`, imported when first asked for: the light parts of this
    package (processes, sandbox) must not pull in Jupyter."""
    if name == "Session":
        from grader.kernel.session import Session

        return Session
    if name == "CellRun":
        from grader.kernel.cells import CellRun

        return CellRun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
