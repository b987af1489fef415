"""The kernel as jupyter_client sees it: a manager that always answers with the grader's
own kernel command (`grader.kernel.launch`), whose connection file the kernel's user may
read, and a provisioner whose process is the kernel forked from the warm template
(`grader.kernel.template`), or the cold kernel it started when it could not fork one."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner

from grader.kernel import sandbox, syscalls, template
from grader.kernel.launch import (
    _LAUNCH,
    grader_folders,
    hand_over,
    start_prefix,
    template_environment,
    template_key,
)
from grader.kernel.processes import spawning
from grader.kernel.sandbox import kernel_path

log = logging.getLogger("grader.kernel")

# How long a message to the kernel may wait to leave (the client's sockets and the
# manager's): a socket whose kernel end is gone (a notebook that wrote over its kernel's
# sockets) has no peer, and ZeroMQ would wait for one forever. Past it the send fails
# (zmq.Again) and the kernel counts as crashed.
SEND_MS = 5000


class _Specs(KernelSpecManager):
    """Always answers with the grader's own kernel command, whatever name is asked for."""

    def __init__(self, argv: list[str], interrupt_mode: str) -> None:
        super().__init__()
        self._spec = KernelSpec(
            argv=argv, display_name="grader", language="python", interrupt_mode=interrupt_mode
        )

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return self._spec


class _Manager(AsyncKernelManager):
    """A kernel manager whose connection file the kernel's user may read."""

    kernel_ids: tuple[int, int] | None = None

    def _context_default(self) -> Any:
        context = super()._context_default()
        context.setsockopt(zmq.SNDTIMEO, SEND_MS)  # an interrupt never waits forever
        return context

    def write_connection_file(self, **kwargs: Any) -> None:
        super().write_connection_file(**kwargs)
        hand_over(Path(self.connection_file), self.kernel_ids)


def kernel_manager(
    root: Path,
    tag: str,
    memory_bytes: int | None,
    sandboxed: bool,
    gpu: bool = False,
    ids: tuple[int, int] | None = None,
    group: Path | None = None,
    hangup_fd: int = -1,
    cold: str = "",
    startup_timeout: float = 60.0,
) -> AsyncKernelManager:
    """A manager for a kernel of the grader's own Python, talking over Unix sockets in `root`.

    With bubblewrap installed, every kernel runs in a PID namespace of its own, sandboxed
    or not: whatever the notebook starts stays inside it, and all of it dies at once with
    the namespace (see `sandbox.contain`). There the kernel is forked from the warm
    template (`grader.kernel.template`) unless `cold` says why not; the cold command stays
    the kernelspec's, for when the template fails.

    Raises:
        KernelStartError: `sandboxed` and bubblewrap is missing.
    """
    contained = sandboxed or sandbox.available(tuple(start_prefix(ids=ids)) if ids else ())
    seccomp = syscalls.program().hex()
    kernel_args = [
        "-f", "{connection_file}",
        # Load torch while the kernel boots, in parallel with the grader's own start-up;
        # the name is deleted, so the candidate's namespace starts empty as usual.
        "--IPKernelApp.exec_lines=import torch as _grader_warm_up; del _grader_warm_up",
    ]  # fmt: skip
    if contained:
        # The grader is invisible from the PID namespace: --die-with-parent ends the
        # kernel with the grader, instead of ipykernel's parent poller; interrupts go as
        # messages (a signal to bubblewrap would not reach the kernel).
        kernel_args.append("--IPKernelApp.parent_handle=0")
    argv = [
        sys.executable, "-E", "-s", "-S", "-B", "-c", _LAUNCH,
        str(memory_bytes or 0), json.dumps(kernel_path()),
        "0" if contained else str(os.getpid()), str(hangup_fd), seccomp, *kernel_args,
    ]  # fmt: skip

    def in_sandbox(command: list[str], drop: bool = True) -> list[str]:
        if sandboxed:
            # Hide the folder that holds our scratch space too: other gradings' scratch
            # spaces (their connection files, their kernels' sockets) are there.
            return sandbox.wrap(
                command, writable=[root], hidden=grader_folders(), private=[root.parent],
                gpu=gpu, ids=ids, drop=drop,
            )  # fmt: skip
        return sandbox.contain(command) if contained else command

    # (the placeholder stays root, without capabilities to use: a forked kernel drops to
    # its user by itself, and cannot signal it)
    placeholder = in_sandbox(list(template.PLACEHOLDER), drop=False)
    argv = in_sandbox(argv)
    # the memory cgroup first; the user too, unless the sandbox drops to it inside (run by
    # root, bubblewrap builds the view as root, then the kernel becomes its user)
    argv = [*start_prefix(group, None if sandboxed and sandbox.as_root() else ids), *argv]
    manager = _Manager(
        kernel_spec_manager=_Specs(argv, "message" if contained else "signal"),
        kernel_name="grader",
        transport="ipc",  # Unix sockets in our private folder: no TCP port for others to reach
    )
    manager.kernel_ids = ids
    manager.client_class = "grader.kernel.process.BoundedKernelClient"
    manager.connection_file = str(root / f"kernel-{tag}.json")
    manager.ip = str(root / f"ipc-{tag}")
    plan = None
    if cold:
        log.info("kernel starts cold: %s", cold)
    else:
        kernel_args[1] = manager.connection_file
        plan = template.WarmPlan(
            placeholder, kernel_args, memory_bytes, hangup_fd, group, startup_timeout,
            template_environment(), template_key(), ids=ids, seccomp=seccomp,
        )  # fmt: skip
    manager.provisioner = provisioner(manager, plan)
    return manager


class WarmProvisioner(LocalProvisioner):
    """Launches the kernel by forking it from the template into a fresh sandbox (with a
    `plan`); when the template cannot (it is broken, or this kernel's setup failed),
    launches the cold command instead, and says why. A cold kernel is our child in a
    session of its own: it is started under `processes.spawning`, so that the reaper of
    orphans leaves its exit to its Popen."""

    plan: template.WarmPlan | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        plan = self.plan
        if plan is None:
            return await self._launch_cold(cmd, **kwargs)
        started = time.monotonic()
        try:
            forked = template.fork_kernel(plan, kwargs)
        except template.TemplateError as e:
            plan.reason.append(str(e))
            log.info("kernel starts cold: %s", e)
            return await self._launch_cold(cmd, **kwargs)
        took = time.monotonic() - started
        log.info("kernel forked from the warm template%s in %.3f s", forked.shared, took)
        self.process = forked  # type: ignore[assignment]  # a Popen as far as jupyter_client sees
        self.pid, self.pgid = forked.pid, None
        self.cwd = kwargs.get("cwd")
        return self.connection_info

    async def _launch_cold(self, cmd: list[str], **kwargs: Any) -> Any:
        with spawning() as own:
            info = await super().launch_kernel(cmd, **kwargs)
            if self.process is not None:
                own(self.process.pid)
        return info

    async def kill(self, restart: bool = False) -> None:
        if isinstance(self.process, template.ForkedKernel):
            self.process.kill()
            return
        await super().kill(restart)

    async def cleanup(self, restart: bool = False) -> None:
        if isinstance(self.process, template.ForkedKernel):
            self.process.release()
        await super().cleanup(restart)


def provisioner(manager: Any, plan: template.WarmPlan | None) -> WarmProvisioner:
    """A `WarmProvisioner` for `manager` (assigned as its provisioner before the start)."""
    manager.kernel_id = manager.kernel_id or str(uuid.uuid4())
    made = WarmProvisioner(
        kernel_id=manager.kernel_id, kernel_spec=manager.kernel_spec, parent=manager
    )
    made.plan = plan
    return made
