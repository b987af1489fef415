"""Timing and peak memory of one call, the same way on both ends of `--profile`: in the
kernel, where the candidate's forward runs (this source is sent there inside the shim's,
and the answer is only numbers, never the output), and in the grader, for torch's own
attention. It needs the standard library and torch, nothing else.

Peak memory is what the call allocates on top of what was allocated when it began: on a
GPU, `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`; on the CPU, which
keeps no such count, the running sum of the allocations and frees torch's profiler
records during the call (`profile_memory=True`), at its highest.
"""

import os
import time


def measure_call(call, repeat=5, warmup=1, budget=1.0, device="cpu", _clock=time.perf_counter):
    """Run `call()` `warmup` times, then time it up to `repeat` times (at least once; no
    more once `budget` seconds have gone on timed calls), then once more to measure its
    peak memory; all without autograd. Returns {"times": [seconds per timed call],
    "peak_bytes": int, "threads": torch's intra-op thread count}."""
    import torch

    cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if cuda else _no_sync
    times: list[float] = []
    with torch.no_grad():
        for _ in range(max(0, int(warmup))):
            call()
            sync()
        started = _clock()
        while not times or len(times) < int(repeat) and _clock() - started < budget:
            begun = _clock()
            output = call()
            sync()
            times.append(_clock() - begun)
            del output
        peak = peak_memory(call, device)
    return {"times": times, "peak_bytes": int(peak), "threads": int(torch.get_num_threads())}


def _no_sync():
    return None


def peak_memory(call, device="cpu"):
    """Bytes `call()` allocates at most on `device` beyond what was allocated before it
    (its output included, while it is alive)."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        output = call()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del output
        return max(0, int(peak))
    from torch.autograd.profiler import profile

    # kineto prints "profiler_start" / "profiler_stop" lines to stderr at any level below 6
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    # the autograd profiler records the same allocations as torch.profiler.profile, without
    # the latter's first-use import of torch._inductor (seconds of CPU in every kernel)
    with profile(profile_memory=True) as recorded:
        output = call()
        del output
    return running_peak(_cpu_allocations(recorded.kineto_results))


def _cpu_allocations(results):
    """(time in ns, bytes: + allocated, - freed) of every CPU allocation the profiler saw."""
    from torch.autograd import DeviceType

    events = []
    for event in results.events():
        if event.name() == "[memory]" and event.device_type() == DeviceType.CPU:
            events.append((event.start_ns(), event.nbytes()))
    return events


def running_peak(allocations):
    """The highest running sum of (time, bytes) allocations taken in time order (a stable
    sort: events recorded at the same instant keep their order)."""
    running = peak = 0
    for _, size in sorted(allocations, key=lambda item: item[0]):
        running += size
        peak = max(peak, running)
    return peak
