"""Find every CPU/GPU device mismatch of a run in one pass (used by `device_check.py --find-mismatches`).

Inside `MismatchFinder`, a torch operation that fails because its tensors sit on different devices is recorded
(its call site in inference_core, the error, the job that hit it) and then retried with the CPU tensors moved to
the accelerator, so the run goes on and the next mismatch shows too. A plain run stops at the first one: on a
lent H100 every method failed that way, at two sites, and one pass of this found both.
"""

from __future__ import annotations

import traceback
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

#: frames of these folders name a call site (the rest is torch's own)
OWN_CODE = ("/inference_core/", "/benchmarks/")


def _call_site(depth: int = 3) -> str:
    frames = [f for f in traceback.extract_stack()[:-2] if any(part in f.filename for part in OWN_CODE)]
    return " <- ".join(f"{f.filename.rsplit('/inference_core/', 1)[-1]}:{f.lineno} {(f.line or '').strip()[:70]}"
                       for f in reversed(frames[-depth:]))


class MismatchFinder(TorchFunctionMode):
    """`with MismatchFinder(device) as finder: finder.job = "svgd/ar2"; run(...)`, then `finder.sites`:
    {call site: (first error line, set of jobs)}."""

    def __init__(self, device: str | torch.device):
        super().__init__()
        self.device = torch.device(device)
        self.job = ""
        self.sites: dict[str, tuple[str, set[str]]] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (RuntimeError, TypeError) as exc:
            if "device" not in str(exc):
                raise
            message = str(exc).splitlines()[0][:120]
            self.sites.setdefault(_call_site(), (message, set()))[1].add(self.job)

            def moved(value: Any) -> Any:
                on_cpu = isinstance(value, torch.Tensor) and value.device.type == "cpu"
                return value.to(self.device) if on_cpu else value

            return func(*tree_map(moved, args), **tree_map(moved, kwargs))

    def report(self) -> str:
        lines = [f"* {site}\n    {message}\n    in: {', '.join(sorted(jobs)[:6])}{' …' if len(jobs) > 6 else ''}"
                 for site, (message, jobs) in self.sites.items()]
        return "\n".join([*lines, f"{len(self.sites)} mismatch site(s)"])
