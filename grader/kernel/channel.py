"""The call channel and its wire format: how one request of the hidden suite reaches the shim
in the kernel, and how its answer comes back.

A request is a `Request` written with ``torch.save`` to a fresh, unguessable file in the
session's private folder (created exclusively, never through a link, so the kernel cannot
have prepared it); the shim answers with an `Answer` in a second such file, which is read
only if it is a regular file of a sane size, and loaded with ``torch.load(weights_only=True)``
after its structure and the tensors it describes are bounded. Nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import zipfile
from pathlib import Path
from typing import Any, TypedDict

from grader.outcomes import NoAnswer

MiB = 1024**2
# Bounds on what the kernel can make the grader hold: an answer file, the pickled structure
# inside it, and the tensors it describes (a stride-0 view of a few bytes can claim
# gigabytes).
MAX_ANSWER_BYTES = 64 * MiB
MAX_STRUCTURE_BYTES = 4 * MiB
MAX_TENSOR_BYTES = 64 * MiB
MAX_NESTING = 32
_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_ANSWER = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Request(TypedDict, total=False):
    """One call into the kernel (what `grader.remote.Kernel` sends, what the shim reads).

    `op` is "call" (``target.method(*args, **kwargs)``, or ``target(...)`` without a
    method), "grad" (backpropagate ``sum(output * cotangent)``), "modules" (the submodules
    of `target`) or "output_cut" (what the shim dropped of each cell's output). A target
    is ``{"__global__": name}`` or ``{"__ref__": n}``; torch is seeded with `seed` first."""

    op: str
    target: dict[str, Any]
    method: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    seed: int | None
    wrt: list[int]
    cotangent: Any
    output_path: list[int]
    params_of: dict[str, Any] | None


class Answer(TypedDict, total=False):
    """The shim's answer: `value` (tensors and plain data; an object of the candidate's as
    ``{"__ref__": n, "type": name}``, a value that cannot cross as ``{"__foreign__": name}``)
    or `raised` (what candidate code raised: type, message, where, line and flags)."""

    value: Any
    raised: dict[str, Any]


class Channel:
    """Request and answer files in the session's private `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def send(self, request: Request) -> tuple[Path, Path]:
        """Write the request; return (request file, where the answer will be).

        Raises:
            NoAnswer: the grader's folder was tampered with.
        """
        import torch  # here, not at the top: the CLI launches the kernel before loading torch

        name = secrets.token_hex(8)
        request_path = self.folder / f"request-{name}.pt"
        answer_path = self.folder / f"answer-{name}.pt"
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            with os.fdopen(os.open(request_path, _OPEN_NEW, 0o600), "wb") as f:
                torch.save(request, f)
        except OSError as e:
            raise NoAnswer(f"the grader's folder was tampered with ({e.strerror})") from None
        return request_path, answer_path

    def receive(self, request_path: Path, answer_path: Path) -> dict[str, Any] | None:
        """The answer (None when the shim wrote none); both files are removed.

        Raises:
            NoAnswer: the answer is there but is not a readable answer of a sane size.
        """
        with contextlib.suppress(OSError):
            request_path.unlink()
        try:
            return read_answer(answer_path)
        finally:
            with contextlib.suppress(OSError):
                answer_path.unlink()

    @staticmethod
    def forget(*paths: Path) -> None:
        """Remove a call's files (an answer written late is never read)."""
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink()

    @staticmethod
    def serve_code(shim: str, namespace: str, request_path: Path, answer_path: Path) -> str:
        """The code the kernel runs to answer one request (`shim` and `namespace` are
        expressions naming the shim module and the notebook's namespace)."""
        return f"{shim}.serve({namespace}, {str(request_path)!r}, {str(answer_path)!r})"


def read_answer(path: Path) -> dict[str, Any] | None:
    """The shim's answer file, or None. Never follows a link, never blocks on a FIFO, never
    unpickles, and holds no more than the bounds above: the file's size and its pickled
    structure are checked before it is loaded, the tensors it describes before any of
    them is used.

    Raises:
        NoAnswer: the file is there but is not a readable answer of a sane size.
    """
    import torch

    try:
        fd = os.open(path, _OPEN_ANSWER)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NoAnswer(f"unreadable answer ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ANSWER_BYTES:
            raise NoAnswer("the answer is not a regular file of a sane size")
        os.set_blocking(fd, True)
        try:
            _check_structure(f)
            answer = torch.load(f, weights_only=True)
        except NoAnswer:
            raise
        except Exception as e:  # a damaged or forged file is the candidate's doing
            raise NoAnswer(f"unreadable answer ({type(e).__name__})") from None
    if not isinstance(answer, dict):
        raise NoAnswer("malformed answer")
    size = tensor_bytes(answer)
    if size > MAX_TENSOR_BYTES:
        raise NoAnswer(
            f"the answer holds tensors of {size:,} bytes, more than the grader accepts "
            f"({MAX_TENSOR_BYTES:,})"
        )
    return answer


def _check_structure(f: Any) -> None:
    """The pickled part of a torch.save archive (everything but tensor data) must be
    small: a few megabytes of pickle can build lists of millions of objects."""
    with zipfile.ZipFile(f) as archive:
        pickles = [i for i in archive.infolist() if i.filename.endswith(".pkl")]
        if sum(i.file_size for i in pickles) > MAX_STRUCTURE_BYTES:
            raise NoAnswer("the answer's structure is too large")
    f.seek(0)


def tensor_bytes(value: Any, depth: int = 0) -> int:
    """The bytes the tensors in an answer would take once materialised (a stride-0 view
    counts at its full size: that is what computing with it costs)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if depth > MAX_NESTING:
        raise NoAnswer("the answer is nested too deeply")
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(item, depth + 1) for item in value)
    return 0
