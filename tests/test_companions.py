"""Counting the CPU of programs other than the kernel while the hidden tests run, on
samples written by hand (the real ones are read from /proc in test_evasions)."""

from __future__ import annotations

from grader.kernel import companions

TICK = companions._TICK
SANDBOX, INNER, KERNEL, HELPER = 10, 11, 12, 13


def test_a_helper_that_works_is_counted():
    before = {SANDBOX: (1, 5, 0), INNER: (SANDBOX, 1, 0), KERNEL: (INNER, 200, 0),
              HELPER: (KERNEL, 0, 0)}  # fmt: skip
    now = {**before, KERNEL: (INNER, 400, 0), HELPER: (KERNEL, TICK, 0)}
    seconds, _ = companions.work(before, now, KERNEL)
    assert seconds == 1.0


def test_the_kernels_own_time_and_its_sandbox_are_not_counted():
    before = {SANDBOX: (1, 5, 0), INNER: (SANDBOX, 1, 0), KERNEL: (INNER, 200, 0)}
    now = {SANDBOX: (1, 6, 0), INNER: (SANDBOX, 2, 0), KERNEL: (INNER, 900, 0)}
    assert companions.work(before, now, KERNEL)[0] == 0


def test_a_helper_that_ended_is_counted_through_its_reaper():
    before = {INNER: (SANDBOX, 1, 0), KERNEL: (INNER, 200, 0), HELPER: (KERNEL, 0, 0)}
    now = {INNER: (SANDBOX, 1, 0), KERNEL: (INNER, 300, 2 * TICK)}
    assert companions.work(before, now, KERNEL)[0] == 2.0


def test_a_kernel_that_died_is_not_charged_to_its_sandbox():
    """The sandbox reaped the crashed kernel: its whole life's CPU is in the sandbox's
    count of reaped children, and is no program's work."""
    before = {SANDBOX: (1, 5, 0), INNER: (SANDBOX, 1, 0), KERNEL: (INNER, 200, 0)}
    now = {SANDBOX: (1, 5, 0), INNER: (SANDBOX, 1, 250)}
    assert companions.work(before, now, KERNEL)[0] == 0


def test_a_helper_still_running_is_counted_after_the_kernel_died():
    before = {INNER: (SANDBOX, 1, 0), KERNEL: (INNER, 200, 0), HELPER: (INNER, 0, 0)}
    now = {INNER: (SANDBOX, 1, 250), HELPER: (INNER, TICK, 0)}
    assert companions.work(before, now, KERNEL)[0] == 1.0
