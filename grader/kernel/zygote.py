"""The warm template's own program: a Python that has imported ipykernel, torch and numpy
once, and forks each grading's kernel from itself (the zygote pattern).

Not imported by the grader: `grader.kernel.template` runs this file's text in a fresh
interpreter (`python -E -s -S -B -c SOURCE PATH SOCKET`), with the allow-listed kernel
environment and nothing per grading. It never runs candidate code, runs no torch op (a
forked child of a process whose OpenMP pool ever ran hangs on its first parallel op),
starts no thread, event loop or zmq context, and never receives a secret: what a kernel
could find of it (its argv, its exec-time environment, its stack) is what every kernel has.

Protocol: the grader connects to the template's Unix socket (SOCK_SEQPACKET; only the
process that started the template, and its direct children, a batch's workers, are
served: never a kernel) and sends one JSON request with its file
descriptors attached (SCM_RIGHTS). The template forks a *keeper* per request and goes back
to listening. The keeper joins the grading's memory cgroup, enters the namespaces of the
grading's placeholder process (bubblewrap's sandbox around a waiting shell: user, mount,
PID, network, IPC, UTS, cgroup, whichever differ from ours) and forks the kernel, which is then
inside that PID namespace. The kernel takes the sandbox's root (chroot through the
placeholder's /proc/PID/root, opened before entering), drops every capability it holds
in a joined user namespace, sets no_new_privs, starts its own session, puts the passed
descriptors at their numbers and closes every other one, takes the kernel environment,
fresh random seeds and the address-space cap, reports "ok" to the keeper and becomes
ipykernel. The keeper answers the grader with the kernel's pid and a pidfd, then waits for
the kernel, tells the grader on the same connection how it ended (its exit code, or minus
the signal that killed it, and the exception that ended ipykernel's start, if one did: the
status pipe stays open after "ok" for that), and exits with it. Anything that fails before "ok" kills the kernel and the
grader starts a cold one instead.
"""

import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys

MAX_WORDS = 2000  # bytes of a kernel's last words (`_last_words`)
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
NAMESPACES = (
    ("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID),
    ("net", CLONE_NEWNET), ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS),
    ("cgroup", CLONE_NEWCGROUP),
)  # fmt: skip
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
MAX_REQUEST = 1 << 20
MAX_FDS = 16
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _joined_namespaces(pid):
    """The CLONE_NEW* flags of the namespaces in which `pid` differs from this process."""
    flags = 0
    for name, flag in NAMESPACES:
        try:
            if os.stat(f"/proc/{pid}/ns/{name}").st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
                flags |= flag
        except FileNotFoundError:  # a namespace kind this kernel does not have
            pass
    return flags


def _drop_capabilities(ids=None):
    """No capability left in any set, none to gain back (what bubblewrap's --cap-drop ALL
    leaves a sandboxed process); with `ids`, become that uid and gid first (as root: the
    kernel is never the host's root), once the bounding set is empty."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 63
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails for caps we never had: fine
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if ids:
        uid, gid = ids
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    header = struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two (effective, permitted, inheritable) structs, all zero
    _check(_libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)), "capset")
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and int(line.split()[1], 16):
                raise OSError(f"capabilities left after the drop: {line.strip()}")


def _place_fds(fds, targets, keep):
    """Put each received descriptor at its target number, inheritable, and close every
    other descriptor from 3 up but `keep`, which move above every target (one may sit
    where a received descriptor must go): their new numbers."""
    floor = max([*targets, *fds, *keep, 2]) + 1  # above every number in play
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    kept = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in keep]
    for fd in (*fds, *keep):
        os.close(fd)
    moved = []
    for fd, target in zip(high, targets, strict=True):
        os.dup2(fd, target, inheritable=True)
        moved.append(target)
    for fd in high:
        if fd not in moved:
            os.close(fd)
    spare = set(moved) | set(kept)
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in spare:
            with contextlib.suppress(OSError):
                os.close(fd)
    return kept


def _kernel(request, fds, status_w, rootfd, flags, objects):
    """In the forked kernel: take the sandbox, the descriptors, the environment, then run
    ipykernel. Never returns."""
    code = 70
    try:
        for obj in objects:  # socket objects of the template and keeper: forget, not close
            obj.detach()
        if flags & CLONE_NEWNS:
            os.fchdir(rootfd)
            os.chroot(".")
        os.close(rootfd)
        os.chdir(request["cwd"])
        ids = request.get("ids")
        if flags & CLONE_NEWUSER or ids:
            _drop_capabilities(ids)
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _refuse_syscalls(request.get("seccomp") or "")  # type: ignore[name-defined]  # noqa: F821 (syscalls.INSTALL, sent first)
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh Python
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start
        (status_w,) = _place_fds(fds, request["fd_targets"], keep=(status_w,))
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        for target in (1, 2):
            if target not in request["fd_targets"]:
                os.dup2(null, target)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None
        limit = int(request["address_space"] or 0)
        if limit:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _reseed()
        hangup = int(request["hangup_fd"])
        if hangup >= 0:
            import threading

            threading.Thread(target=_hangup, args=(hangup,), daemon=True).start()
        sys.argv = ["ipykernel_launcher", *request["argv"]]
        os.write(status_w, b"ok")  # (the pipe stays open: see `_last_words`)
        import runpy

        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    except BaseException as e:  # noqa: BLE001 (reported to the keeper, then exit)
        with contextlib.suppress(OSError):
            os.set_blocking(status_w, False)  # never wait on a reader
            os.write(status_w, _last_words(e).encode()[:MAX_WORDS])
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
        finally:
            os._exit(code)


def _last_words(error):
    """What ended a kernel, in one line: the exception and where it was raised. Before "ok"
    it is why the fork failed; after, why ipykernel did not start (the keeper passes it on
    with the exit code: the kernel's own stderr goes nowhere)."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{where}: {error}".rstrip(": ")


def _reseed():
    """Fresh random streams: a forked child inherits the template's generators, the same
    in every kernel (Python's `random` reseeds itself at fork; torch and numpy do not)."""
    import random

    random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _hangup(fd):
    """The grader holds the only writing end of the call channel: when it hangs up,
    however the grader went, the kernel exits."""
    poll = select.poll()
    poll.register(fd, 0)
    gone = select.POLLHUP | select.POLLERR
    while not any(event & gone for _, event in poll.poll()):
        pass
    os._exit(1)


def _keeper(conn, request, fds, objects):
    """In the forked keeper: join the cgroup and the namespaces, fork the kernel, answer
    the grader, wait for the kernel. Never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # we wait for the kernel
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        procs = request.get("cgroup_procs")
        if procs:
            with open(procs, "w") as f:  # the kernel inherits the cgroup at fork
                f.write("0")
        join = int(request["join"])
        pidfd = os.pidfd_open(join)
        rootfd = os.open(f"/proc/{join}/root", os.O_PATH | os.O_DIRECTORY)
        flags = _joined_namespaces(join)
        if flags:
            _check(_libc.setns(pidfd, flags), "setns")
        os.close(pidfd)
        status_r, status_w = os.pipe()
        kernel = os.fork()
        if kernel == 0:
            os.close(status_r)
            _kernel(request, fds, status_w, rootfd, flags, [*objects, conn])
        os.close(status_w)
        os.close(rootfd)
        for fd in fds:
            os.close(fd)
        kernel_fd = os.pidfd_open(kernel)
        said = b""
        while said[:2] != b"ok" and (chunk := os.read(status_r, MAX_WORDS)):
            said += chunk
        answer: dict[str, object]
        if said[:2] == b"ok":
            answer = {"pid": kernel}
        else:
            os.kill(kernel, signal.SIGKILL)
            answer = {"error": said.decode(errors="replace") or "the kernel exited at start"}
        socket.send_fds(conn, [json.dumps(answer).encode()], [kernel_fd])
        os.close(kernel_fd)
        _, status = os.waitpid(kernel, 0)
        code = os.waitstatus_to_exitcode(status)
        os.set_blocking(status_r, False)
        with contextlib.suppress(OSError):  # nothing said: it exited cleanly, or was killed
            said += os.read(status_r, MAX_WORDS)
        os.close(status_r)
        words = said[2:MAX_WORDS].decode(errors="replace")
        with contextlib.suppress(OSError):  # how it ended (the grader may have gone)
            conn.send(json.dumps({"exit": code, "words": words}).encode())
        conn.close()
        code = code if code >= 0 else 128 - code
    except BaseException as e:  # noqa: BLE001 (told to the grader, then exit)
        with contextlib.suppress(OSError):
            conn.send(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
    finally:
        os._exit(code)


def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _serve(server, owner):
    """Fork a keeper for each request of `owner` (the grader that started us) or of a
    direct child of it (a batch's workers), until the grader closes our stdin (it went,
    one way or another). Kernels are never the owner's children."""
    while True:
        ready, _, _ = select.select([server, 0], [], [])
        if 0 in ready and not os.read(0, 1):
            return
        if server not in ready:
            continue
        conn, _ = server.accept()
        fds: list[int] = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            peer = struct.unpack("3i", creds)[0]
            data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, MAX_FDS)
            if not data or (peer != owner and _parent_of(peer) != owner):
                continue
            request = json.loads(data)
            if os.fork() == 0:
                _keeper(conn, request, fds, [server])
        except (OSError, ValueError):
            pass
        finally:
            conn.close()
            for fd in fds:
                os.close(fd)


def main():
    path, address = json.loads(sys.argv[1]), sys.argv[2]
    sys.path[:] = path
    owner = os.getppid()  # it holds our stdin's other end: we end when it closes
    # Ctrl-C reaches the grader's whole process group: the grader stops, then closes us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # What a kernel loads before it answers: a forked kernel starts with all of it.
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import ipykernel.zmqshell  # noqa: F401
    import ipykernel_launcher  # type: ignore[import-untyped]  # noqa: F401
    import IPython  # noqa: F401
    import jupyter_client.session  # noqa: F401
    import numpy  # noqa: F401
    import numpy.random  # noqa: F401
    import torch  # noqa: F401
    import zmq  # noqa: F401

    for name in json.loads(sys.argv[3]) if len(sys.argv) > 3 else ():
        with contextlib.suppress(Exception):  # one this environment lacks: fine
            __import__(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the system
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(address)
    server.listen(16)
    _serve(server, owner)
    with contextlib.suppress(OSError):  # the grader may have gone without a word
        os.unlink(address)
        os.rmdir(os.path.dirname(address))
    os._exit(0)


if __name__ == "__main__":
    main()
