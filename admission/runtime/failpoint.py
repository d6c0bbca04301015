"""A test hook: `fitgate serve` exits hard at a named step of the Workload reconciler.

Off by default. With the environment variable `FITGATE_TEST_EXIT_AT` set to a step name,
the process ends with `os._exit(EXIT_CODE)` the first time the reconciler reaches that
step: no cleanup, no Lease release, nothing flushed but the line that says so, as a crash
at exactly that point. The fault tests (e2e/tests/test_check.py) use it to prove that a
restarted fitgate converges from each step; no other code reads it.

Steps:

- `planned`: the plan needs new nodes; nothing of it is written yet (no PodTemplate, no
  ProvisioningRequest, the check still as it was).
- `requested`: the request and its templates exist; the check does not say so yet.
- `provisioned`: the request is Provisioned; the new nodes are not yet looked at
  (no readiness, no verification).

`check_environment()` runs at `fitgate serve` start: an unknown step name stops the start
with a message naming the variable and the known steps, instead of never firing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

ENV = "FITGATE_TEST_EXIT_AT"
STEPS = ("planned", "requested", "provisioned")
EXIT_CODE = 86  # distinct from fitgate's own exit codes, so a test can tell the two apart


class UnknownStep(ValueError):
    """FITGATE_TEST_EXIT_AT names no step."""


def check_environment(env: Mapping[str, str] | None = None) -> str | None:
    """The step armed by the environment (None: the hook is off)."""
    value = (os.environ if env is None else env).get(ENV, "")
    if not value:
        return None
    if value not in STEPS:
        raise UnknownStep(f"{ENV}={value!r} is not a step; known steps: {', '.join(STEPS)}")
    return value


def reach(step: str) -> None:
    """Exit the process now if `step` is the armed step; otherwise nothing."""
    if step not in STEPS:
        raise UnknownStep(f"no failpoint step {step!r}")
    if os.environ.get(ENV) == step:
        print(f"fitgate: {ENV}={step}: exiting with {EXIT_CODE} (test hook)",
              file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)
