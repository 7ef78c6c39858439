"""The client's pure pieces: SSE parsing, problem bodies → typed errors, spec files, named ArviZ variables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import parvis
from parvis.errors import error_from_problem
from parvis.export import block_dims, named_variables
from parvis.progress import EventStreamParser, describe, headline_metric, quality_notes
from parvis.specs import load_spec


def test_event_stream_parser_yields_job_events_only() -> None:
    parser = EventStreamParser()
    state = {"id": "job_1", "status": "running"}
    lines = [": keep-alive", "", "id: 1", "event: job", f"data: {json.dumps(state)}", "", "event: other",
             "data: {}", ""]
    assert [event for line in lines if (event := parser.feed(line)) is not None] == [state]
    # A payload split over several data lines is joined with newlines (SSE), here still one JSON value.
    assert [parser.feed(x) for x in ["event: job", 'data: {"id": "job_2",', 'data: "status": "queued"}', ""]][-1] \
        == {"id": "job_2", "status": "queued"}


def test_problem_bodies_become_typed_errors() -> None:
    body = {"code": "too_many_streams", "detail": "8 event streams are open", "request_id": "r1", "status": 429}
    error = error_from_problem(429, body, {"retry-after": "10"})
    assert isinstance(error, parvis.RateLimitError) and error.retry_after == 10.0
    assert (error.code, error.status, error.request_id, str(error)) == \
        ("too_many_streams", 429, "r1", "8 event streams are open [too_many_streams]")
    assert isinstance(error_from_problem(410, {"code": "expired", "detail": "gone"}), parvis.NotFoundError)
    assert isinstance(error_from_problem(422, {"code": "spec_invalid", "detail": "x"}), parvis.ValidationError)
    bare = error_from_problem(502, "<html>bad gateway</html>")
    assert isinstance(bare, parvis.ServerError) and bare.code == "http_502"


def test_specs_from_json_and_yaml_files(tmp_path: Path) -> None:
    spec = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0], "cov": [[1]]}}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    (tmp_path / "s.yaml").write_text("method: svgd\ntarget: {kind: gaussian, mean: [0], cov: [[1]]}\n")
    assert load_spec(tmp_path / "s.json") == load_spec(str(tmp_path / "s.yaml")) == spec
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "tagged.yaml").write_text("!!python/object/apply:os.system ['true']\n")  # safe_load refuses
    for name in ("list.yaml", "tagged.yaml", "missing.json"):
        with pytest.raises(parvis.ParvisError) as refused:
            load_spec(tmp_path / name)
        assert refused.value.code == "spec_unreadable"


def test_named_variables_split_a_flat_layout() -> None:
    layout = [{"name": "layer0.weight", "shape": [2, 3], "offset": 0}, {"name": "layer0.bias", "shape": [2], "offset": 6},
              {"name": "log_noise_precision", "shape": [], "offset": 8}]
    draws = np.arange(5 * 9, dtype=np.float32).reshape(5, 9)
    variables, dims = named_variables(draws, layout)
    np.testing.assert_array_equal(variables["layer0.weight"][0, 4], [[36, 37, 38], [39, 40, 41]])
    np.testing.assert_array_equal(variables["log_noise_precision"][0], draws[:, 8])
    assert dims == {"layer0.weight": ["layer0_out", "layer0_in"], "layer0.bias": ["layer0_out"],
                    "log_noise_precision": []}
    assert block_dims("scale_tril", [3, 3]) == ["scale_tril_dim_0", "scale_tril_dim_1"]
    with pytest.raises(parvis.ParvisError) as short:
        named_variables(draws[:, :8], layout)
    assert short.value.code == "layout_invalid"
    variables, dims = named_variables(draws)
    assert variables["x"].shape == (1, 5, 9) and dims == {"x": ["x_dim"]}


def test_describe_and_headline_metric() -> None:
    job = {"id": "job_1", "status": "running", "progress": {"step": 5, "total_steps": 10, "eta_s": 65.2},
           "metrics": {"ksd": 0.5, "loss": 1.25}}
    assert headline_metric(job["metrics"]) == ("loss", 1.25)
    assert describe(job) == "job_1  running  step 5/10  loss=1.25  eta 01:05"
    assert quality_notes(job) == []
    flagged = {**job, "status": "succeeded", "quality": {
        "verdict": "unreliable", "warnings": [{"code": "collapsed", "message": "spread less"}],
        "next_steps": ["use auto"]}}
    assert describe(flagged) == "job_1  succeeded  step 5/10  loss=1.25  quality unreliable"
    assert quality_notes(flagged) == ["  warning collapsed: spread less", "  try: use auto"]
