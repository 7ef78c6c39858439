"""Launch configurations of the fused Triton kernels: measured defaults, and optional tuning per device.

Interpreted (TRITON_INTERPRET=1, CPU tests) every kernel runs 32×32 tiles (tl.dot needs 16 or more). On
CUDA the defaults below were chosen from the configuration sweep of `benchmarks/pairwise_gpu.py --sweep` on
a lent H200 (docs/benchmarks.md, "Pairwise kernels (GPU)"). With PARVIS_TRITON_AUTOTUNE=1 the first call of
a shape class times every candidate on a sub-problem of at most TUNE_ROWS rows (so tuning stays a fraction
of a second at n = 10⁶) and keeps the fastest, in memory and in a JSON file per device under
$PARVIS_TRITON_CACHE (default ~/.cache/parvis), so later processes on that device skip the timing.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

AUTOTUNE_ENV = "PARVIS_TRITON_AUTOTUNE"
CACHE_ENV = "PARVIS_TRITON_CACHE"
TUNE_ROWS = 16384


@dataclass(frozen=True)
class Config:
    bm: int
    bn: int
    warps: int = 4
    stages: int = 2

    @property
    def launch(self) -> dict:
        return {"num_warps": self.warps, "num_stages": self.stages}


INTERPRETED = Config(32, 32)
#: Candidates timed by the sweep and by autotuning.
CANDIDATES = (
    Config(64, 64, 4, 2),
    Config(128, 64, 8, 2),
    Config(128, 128, 8, 2),
    Config(64, 128, 4, 2),
    Config(128, 32, 4, 2),
    Config(256, 64, 8, 2),
)
#: Defaults by (kernel, distance form): the sweep's winners at n = 10⁴-10⁵ (see the module docstring).
DEFAULTS: dict[tuple[str, bool], Config] = {
    ("pairs", True): Config(64, 64, 4, 2),
    ("pairs", False): Config(128, 64, 8, 2),
    ("ksd", True): Config(64, 64, 4, 2),
    ("ksd", False): Config(64, 64, 4, 2),
}

_lock = threading.Lock()
_tuned: dict[str, dict[str, Config]] = {}
_forced: list[Config] = []


@contextmanager
def forced(cfg: Config) -> Iterator[None]:
    """Every CUDA launch inside the block uses `cfg` (the benchmark's configuration sweep)."""
    _forced.append(cfg)
    try:
        yield
    finally:
        _forced.pop()


def set_defaults(table: dict[tuple[str, bool], Config]) -> None:
    """Replace measured defaults (the benchmark applies its sweep's winners to the grid that follows)."""
    DEFAULTS.update(table)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def autotuning() -> bool:
    return os.environ.get(AUTOTUNE_ENV, "0").lower() in ("1", "true", "yes", "on")


def _cache_file(device: torch.device) -> Path:
    name = torch.cuda.get_device_name(device).replace(" ", "_").replace("/", "_")
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "parvis")
    return root / f"triton-tuning-{name}.json"


def _device_table(device: torch.device) -> dict[str, Config]:
    key = str(device)
    if key not in _tuned:
        table: dict[str, Config] = {}
        path = _cache_file(device)
        try:
            table = {k: Config(**v) for k, v in json.loads(path.read_text()).items()}
        except (OSError, ValueError, TypeError):
            table = {}
        _tuned[key] = table
    return _tuned[key]


def config(
    kernel: str,
    device: torch.device,
    *,
    direct: bool,
    shape_class: str,
    run: Callable[[Config], object] | None = None,
) -> Config:
    """The launch configuration for one call. `shape_class` names what makes configurations differ (d,
    operand widths, precision); `run(cfg)` launches the kernel on a sub-problem, for tuning."""
    if _interpreting() or device.type != "cuda":
        return INTERPRETED
    if _forced:
        return _forced[-1]
    if not autotuning() or run is None:
        return DEFAULTS[(kernel, direct)]
    key = f"{kernel}|{'direct' if direct else 'gram'}|{shape_class}"
    with _lock:
        table = _device_table(device)
        if key not in table:
            table[key] = _fastest(run)
            _save(device, table)
        return table[key]


def _fastest(run: Callable[[Config], object]) -> Config:
    from triton.testing import do_bench

    best, best_t = DEFAULTS[next(iter(DEFAULTS))], float("inf")
    for cfg in CANDIDATES:
        try:
            t = do_bench(lambda cfg=cfg: run(cfg), warmup=5, rep=20)
        except Exception:  # noqa: BLE001 (a configuration that does not compile or fit is skipped)
            continue
        if t < best_t:
            best, best_t = cfg, t
    return best


def _save(device: torch.device, table: dict[str, Config]) -> None:
    path = _cache_file(device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in table.items()}, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: tuning stays in memory for this process
