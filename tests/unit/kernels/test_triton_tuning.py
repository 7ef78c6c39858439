"""Launch configurations of the fused kernels: fixed when interpreted, forced by the benchmark's sweep, and
tuned choices kept per device in a JSON file that a later process reads back."""

from __future__ import annotations

import torch

from inference_core.kernels import triton_tuning as tt


def test_cpu_and_interpreted_calls_use_the_small_fixed_tiles(monkeypatch):
    monkeypatch.setenv(tt.AUTOTUNE_ENV, "1")
    ran = []
    cfg = tt.config("pairs", torch.device("cpu"), direct=True, shape_class="d2", run=ran.append)
    assert cfg == tt.INTERPRETED and not ran  # nothing is timed off a GPU


def test_forced_configuration_wins_on_cuda_and_is_undone(monkeypatch):
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(tt, "_interpreting", lambda: False)
    chosen = tt.Config(256, 64, 8, 2)
    with tt.forced(chosen):
        assert tt.config("pairs", cuda, direct=False, shape_class="d64") == chosen
    assert tt.config("pairs", cuda, direct=False, shape_class="d64") == tt.DEFAULTS[("pairs", False)]


def test_tuned_choice_is_timed_once_saved_and_read_back(monkeypatch, tmp_path):
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(tt, "_interpreting", lambda: False)
    monkeypatch.setenv(tt.AUTOTUNE_ENV, "1")
    monkeypatch.setattr(tt, "_cache_file", lambda device: tmp_path / "tuning.json")
    monkeypatch.setattr(tt, "_tuned", {})
    timed = []

    def fastest(run):
        timed.append(run)
        return tt.CANDIDATES[2]

    monkeypatch.setattr(tt, "_fastest", fastest)
    first = tt.config("pairs", cuda, direct=True, shape_class="d2-w16", run=lambda cfg: None)
    again = tt.config("pairs", cuda, direct=True, shape_class="d2-w16", run=lambda cfg: None)
    assert first == again == tt.CANDIDATES[2] and len(timed) == 1
    monkeypatch.setattr(tt, "_tuned", {})  # a new process: the file answers, nothing is timed
    assert tt.config("pairs", cuda, direct=True, shape_class="d2-w16", run=lambda cfg: None) == tt.CANDIDATES[2]
    assert len(timed) == 1
