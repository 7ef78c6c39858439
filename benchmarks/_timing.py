"""Small timing and reporting helpers shared by the benchmark scripts (not part of the library)."""

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def median_seconds(fn: Callable[[], object], *, warmup: int = 3, repeats: int = 20, min_seconds: float = 0.0,
                   max_seconds: float = 60.0, sync: Callable[[], object] | None = None) -> float:
    """Median wall time of fn() after `warmup` calls: at least `repeats` runs or `min_seconds` of runs,
    stopping early once `max_seconds` have been spent (with at least 3 timed runs)."""
    for _ in range(warmup):
        fn()
        if sync is not None:
            sync()
    times: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if len(times) >= repeats and spent >= min_seconds:
            break
        if spent >= max_seconds and len(times) >= 3:
            break
    return statistics.median(times)


def timed_calls(fn: Callable[[], object], repeats: int, warmup: int = 3) -> list[float]:
    """Wall seconds of `repeats` calls of fn after `warmup` untimed ones (for latency percentiles)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else "unknown"


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min)"


def machine_summary(with_load: bool = False) -> str:
    """CPU, cores, torch threads and versions (and the load average now) for a report's header."""
    import torch

    text = (f"{cpu_model()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch thread(s), "
            f"torch {torch.__version__}, Python {platform.python_version()}")
    return f"{text}; load average {load_average()}" if with_load else text


def replace_section(path: Path, title: str, body: str, doc_title: str = "Benchmarks") -> None:
    """Write `## title` + body into a markdown file, replacing only that section (up to the next `## `);
    a missing file is created under `# doc_title`."""
    header = f"## {title}"
    text = path.read_text() if path.exists() else f"# {doc_title}\n\nEach section is written by the script it names.\n"
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == header), None)
    section = [header, "", *body.rstrip("\n").splitlines(), ""]
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", *section]
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}×" if value >= 100 else f"{value:.1f}×" if value >= 10 else f"{value:.2f}×"


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.0f} µs"
