"""The wire format of the call channel, used on both ends: the grader imports this module,
and its source runs in the kernel too, inside the shim (the kernel may not import the
grader). It needs the standard library and torch (imported on first use), nothing else.

A message is a frame: a 16-byte header (the call's sequence number and the payload's
length, little-endian) and the payload. A payload is a 4-byte length, a JSON structure,
then the raw bytes of every tensor it holds. The JSON carries None, booleans, numbers,
strings and lists as themselves; everything else is an object with one tag:

    {"t": [...]} a tuple          {"d": {...}} a dict (string keys)
    {"m": [[k, v], ...]} a dict with other keys (ints, bytes, tuples: any hashable value
        the wire carries)         {"b": "hex"} bytes
    {"T": [dtype, shape, offset, nbytes, stride]} a tensor: the storage it spans is at
        offset in the blob, so its layout (a transposed view, say) crosses too
    {"dtype": "float32"}          {"size": [...]} a torch.Size

Nothing is unpickled and no code runs on reading: `unpack` builds tensors from raw bytes
of a known dtype, after checking the structure's size and depth and that every tensor's
bytes are exactly its shape's, within the bounds it is given.
"""

import functools
import json
import struct

WIRE_HEADER = struct.Struct("<QQ")  # sequence number, payload length
_WIRE_LENGTH = struct.Struct("<I")
_WIRE_DTYPE_NAMES = (
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "bool",
    "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
)  # fmt: skip


# No tensor dimension or stride is this long (torch's sizes are int64; a forged entry
# past it, or an empty tensor claiming one, is refused before torch sees it).
_MAX_DIMENSION = 1 << 48


@functools.cache
def wire_dtypes():
    """{name: dtype} of every dtype the wire carries (torch is imported on first use, so
    the grader can load this module before it loads torch)."""
    import torch

    dtypes = {name: getattr(torch, name, None) for name in _WIRE_DTYPE_NAMES}
    return {name: dtype for name, dtype in dtypes.items() if isinstance(dtype, torch.dtype)}


@functools.cache
def _wire_names():
    return {dtype: name for name, dtype in wire_dtypes().items()}


class WireError(ValueError):
    """A value the wire does not carry, or a payload that is not one it accepts."""


def pack(value, max_structure=None, max_tensors=None, _dumps=json.dumps, _length=_WIRE_LENGTH.pack):
    """The payload that carries `value` (tensors, plain data, and lists, tuples and
    string-keyed dicts of them).

    Raises:
        WireError: `value` holds something else, its structure is larger than
            `max_structure` bytes, or its tensors, counted at their full size (a
            stride-0 view of a few bytes can claim gigabytes), than `max_tensors`; both
            are checked before anything is copied.
    """
    blobs: list[bytes] = []
    budget = [max_tensors if max_tensors is not None else float("inf")]
    structure = _dumps(_wire_tree(value, blobs, [0], 0, budget), allow_nan=True).encode()
    if max_structure is not None and len(structure) > max_structure:
        raise WireError(f"a structure of {len(structure):,} bytes is too large to send")
    return b"".join([_length(len(structure)), structure, *blobs])


def _wire_tree(value, blobs, offset, depth, budget):
    import torch

    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if depth > 64:
        raise WireError("nested too deeply to send")
    if kind is list:
        return [_wire_tree(item, blobs, offset, depth + 1, budget) for item in value]
    if kind is tuple:
        return {"t": [_wire_tree(item, blobs, offset, depth + 1, budget) for item in value]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is dict:
        if not all(type(key) is str for key in value):
            return {
                "m": [
                    [
                        _wire_tree(key, blobs, offset, depth + 1, budget),
                        _wire_tree(item, blobs, offset, depth + 1, budget),
                    ]
                    for key, item in value.items()
                ]
            }
        return {
            "d": {
                key: _wire_tree(item, blobs, offset, depth + 1, budget)
                for key, item in value.items()
            }
        }
    if isinstance(value, torch.Tensor):
        names = _wire_names()
        if value.dtype not in names or value.layout != torch.strided:
            raise WireError(f"a {value.dtype} tensor ({value.layout}) cannot be sent")
        tensor = value.detach().cpu().resolve_conj().resolve_neg()
        span = _span(list(tensor.shape), list(tensor.stride()))
        size = max(tensor.numel(), span) * tensor.element_size()
        budget[0] -= size
        if budget[0] < 0:
            raise WireError(f"a tensor of {size:,} bytes (shape {tuple(value.shape)}) is too large")
        # the storage it spans, so that its layout (strides) crosses too
        flat = tensor.as_strided((span,), (1,), tensor.storage_offset())
        data = flat.contiguous().view(torch.uint8).numpy().tobytes()
        blobs.append(data)
        shape, stride = list(tensor.shape), list(tensor.stride())
        entry = [names[tensor.dtype], shape, offset[0], len(data), stride]
        offset[0] += len(data)
        return {"T": entry}
    if kind is torch.Size:
        return {"size": list(value)}
    if isinstance(value, torch.dtype) and value in _wire_names():
        return {"dtype": _wire_names()[value]}
    raise WireError(f"the wire does not carry {kind.__qualname__}")


def _span(shape, stride):
    """How many elements of storage a tensor of this shape and stride reaches."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * step for n, step in zip(shape, stride, strict=True))


def unpack(payload, max_structure, max_tensors, max_depth, _loads=json.loads):
    """The value a payload carries. Refuses (WireError) a payload whose structure is over
    `max_structure` bytes or nested deeper than `max_depth`, whose tensors add up to more
    than `max_tensors` bytes, or that is not well formed."""
    view = memoryview(payload)
    if len(view) < _WIRE_LENGTH.size:
        raise WireError("a truncated payload")
    (size,) = _WIRE_LENGTH.unpack_from(view)
    if size > max_structure:
        raise WireError(f"the answer's structure is too large ({size:,} bytes)")
    start = _WIRE_LENGTH.size + size
    if start > len(view):
        raise WireError("a truncated payload")
    try:
        tree = _loads(bytes(view[_WIRE_LENGTH.size : start]))
    except (ValueError, RecursionError) as e:
        raise WireError(f"a malformed structure ({type(e).__name__})") from None
    blob = view[start:]
    total = _tensor_bytes(tree, 0, max_depth)
    if total > max_tensors:
        raise WireError(
            f"the answer holds tensors of {total:,} bytes, more than the grader accepts "
            f"({max_tensors:,})"
        )
    try:
        return _unwire_tree(tree, blob)
    except WireError:
        raise
    except (RuntimeError, ValueError, TypeError, OverflowError, IndexError) as e:
        # what torch makes of a forged entry (a size past int64, a view it refuses)
        raise WireError(f"a malformed tensor entry ({type(e).__name__})") from None


def _tensor_bytes(tree, depth, max_depth):
    """What the tensors in `tree` claim, in bytes (before any is built); checks depth."""
    if depth > max_depth:
        raise WireError("the answer is nested too deeply")
    if isinstance(tree, list):
        return sum(_tensor_bytes(item, depth + 1, max_depth) for item in tree)
    if not isinstance(tree, dict):
        return 0
    if len(tree) != 1:
        raise WireError("a malformed structure (an untagged object)")
    ((tag, body),) = tree.items()
    if tag == "T":
        return _claimed_bytes(body)
    if tag == "t" and isinstance(body, list):
        items = body
    elif tag == "d" and isinstance(body, dict):
        items = list(body.values())
    elif tag == "m" and isinstance(body, list):
        items = body  # [key, value] pairs: lists, one level deeper
    else:
        return 0
    return sum(_tensor_bytes(item, depth + 1, max_depth) for item in items)


def _claimed_bytes(entry):
    """The bytes a tensor entry holds, or its tensor takes once used, whichever is more (a
    stride-0 view of a few bytes can claim gigabytes)."""
    if not (isinstance(entry, list) and len(entry) == 5 and entry[0] in wire_dtypes()):
        raise WireError("a malformed tensor entry")
    _, shape, _, nbytes, _ = entry
    if type(nbytes) is not int or not isinstance(shape, list):
        raise WireError("a malformed tensor entry")
    if not all(type(n) is int and 0 <= n < _MAX_DIMENSION for n in shape):
        raise WireError("a malformed tensor entry")
    numel = 1
    for n in shape:
        numel *= n
    return max(nbytes, numel * wire_dtypes()[entry[0]].itemsize)


def _unwire_tree(tree, blob):
    import torch

    if not isinstance(tree, (list, dict)):
        return tree
    if isinstance(tree, list):
        return [_unwire_tree(item, blob) for item in tree]
    ((tag, body),) = tree.items()
    if tag == "t" and isinstance(body, list):
        return tuple(_unwire_tree(item, blob) for item in body)
    if tag == "d" and isinstance(body, dict):
        return {key: _unwire_tree(item, blob) for key, item in body.items()}
    if tag == "m" and isinstance(body, list):
        pairs = [_unwire_tree(item, blob) for item in body]
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
            raise WireError("a malformed structure (a mapping entry that is not a pair)")
        try:
            return dict(pairs)
        except TypeError:  # a key that cannot be hashed (a list, a tensor)
            raise WireError("a malformed structure (a mapping key that cannot be hashed)") from None
    if tag == "b" and isinstance(body, str):
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise WireError("a malformed structure (bytes that are not hex)") from None
    if tag == "T":
        return _tensor(body, blob)
    if (
        tag == "size"
        and isinstance(body, list)
        and all(type(n) is int and abs(n) < _MAX_DIMENSION for n in body)
    ):
        return torch.Size(body)
    if tag == "dtype" and body in wire_dtypes():
        return wire_dtypes()[body]
    raise WireError(f"a malformed structure (tag {str(tag)[:20]!r})")


def _tensor(entry, blob):
    import torch

    name, shape, offset, nbytes, stride = entry  # checked by _claimed_bytes but the stride
    if not isinstance(stride, list) or len(stride) != len(shape):
        raise WireError("a malformed tensor entry")
    if (
        not all(type(n) is int and 0 <= n < _MAX_DIMENSION for n in stride)
        or type(offset) is not int
    ):
        raise WireError("a malformed tensor entry")
    dtype = wire_dtypes()[name]
    span = _span(shape, stride)
    if span * dtype.itemsize != nbytes or offset < 0 or offset + nbytes > len(blob):
        raise WireError("a tensor whose bytes do not match its shape")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    data = bytearray(blob[offset : offset + nbytes])
    flat = torch.frombuffer(data, dtype=torch.uint8).view(dtype)
    return flat.as_strided(shape, stride)
