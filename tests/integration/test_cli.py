"""The client commands of `parvis` and the README's examples, run as a user runs them (subprocesses, real
HTTP) against a spawned `parvis serve`: outputs, progress on stderr, one-line errors with the problem code
and the exit statuses (0 ok, 1 error, 2 usage, 3 a waited-for job failed or was cancelled)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import parvis
from app.cli import build_parser
from tests.support.serve import ServedParvis, client_env
from tests.support.stack import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GAUSSIAN = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.8], [0.8, 2.0]]}
CLIENT_COMMANDS = ["submit", "status", "watch", "cancel", "jobs", "sample", "particles", "download", "methods",
                   "targets"]


def parvis_cli(served: Any, cwd: Path, *args: str, stdin: str | None = None,
               url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = client_env(cwd, url or served.url)
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def one_error_line(result: subprocess.CompletedProcess[str], code: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("parvis: error: ") and lines[0].endswith(f"[{code}]"), lines[0]
    return lines[0]


def test_submit_wait_status_sample_download(served: Any, tmp_path: Path) -> None:
    spec = {"method": "gpvi", "num_particles": 100, "steps": 300, "options": {"helper": "matrix"}, "target": GAUSSIAN}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    submitted = parvis_cli(served, tmp_path, "submit", "spec.json", "--wait")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert re.fullmatch(r"job_[0-9a-f]+", job_id)
    assert "300/300 steps" in submitted.stderr and "%|" in submitted.stderr  # the live bar
    assert re.search(rf"{job_id}\s+succeeded\s+step 300/300", submitted.stderr)  # the final line

    sampler_id = parvis_cli(served, tmp_path, "status", job_id, "--field", "sampler_id").stdout.strip()
    assert sampler_id.startswith("smp_")
    assert json.loads(parvis_cli(served, tmp_path, "status", job_id, "--json").stdout)["id"] == job_id
    assert "succeeded" in parvis_cli(served, tmp_path, "status", job_id).stdout

    for output in ("draws.npy", "draws.csv"):
        assert parvis_cli(served, tmp_path, "sample", sampler_id, "-n", "200", "--seed", "4", "-o",
                          output).returncode == 0
    expected = np.asarray(httpx.post(f"{served.url}/v1/samplers/{sampler_id}/sample", json={"n": 200, "seed": 4},
                                     timeout=60).json()["samples"], dtype=np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "draws.npy", allow_pickle=False), expected)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "draws.csv", delimiter=",", skiprows=1, dtype=np.float32),
                                  expected)
    # A job id stands for its sampler.
    assert parvis_cli(served, tmp_path, "sample", job_id, "-n", "200", "--seed", "4", "-o", "again.npy").returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "again.npy"), expected)

    downloaded = parvis_cli(served, tmp_path, "download", sampler_id, "-o", "s.zip")
    assert downloaded.returncode == 0 and downloaded.stdout.strip() == "s.zip"
    np.testing.assert_array_equal(parvis.load_sampler(tmp_path / "s.zip").sample(200, seed=4), expected)

    assert parvis_cli(served, tmp_path, "particles", job_id, "-o", "p.npy").returncode == 0
    particles = httpx.get(f"{served.url}/v1/jobs/{job_id}/particles", timeout=60).json()["particles"]
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), np.asarray(particles, dtype=np.float32))

    listed = parvis_cli(served, tmp_path, "jobs", "--status", "succeeded").stdout.splitlines()
    assert listed[0].split("\t")[:2] == ["id", "status"]
    assert any(line.startswith(f"{job_id}\tsucceeded\tgpvi\t300/300") for line in listed[1:])
    watched = parvis_cli(served, tmp_path, "watch", job_id, "-q")
    assert watched.returncode == 0 and "succeeded" in watched.stderr and "%|" not in watched.stderr
    methods = parvis_cli(served, tmp_path, "methods").stdout.splitlines()
    assert {"svgd", "gpvi", "auto"} <= {line.split("\t")[0] for line in methods}
    assert "gaussian" in {line.split("\t")[0] for line in parvis_cli(served, tmp_path, "targets").stdout.splitlines()}


def test_errors_are_one_line_with_the_code_and_exit_statuses(served: Any, tmp_path: Path) -> None:
    missing = parvis_cli(served, tmp_path, "status", "job_missing")
    assert missing.returncode == 1
    assert one_error_line(missing, "not_found") == "parvis: error: no job with id 'job_missing' [not_found]"

    bad = {"method": "svgd", "steps": 10, "target": {"kind": "gaussian", "mean": [0, 0], "cov": [[1, 2], [2, 1]]}}
    invalid = parvis_cli(served, tmp_path, "submit", "-", stdin=json.dumps(bad))
    assert invalid.returncode == 1 and "positive definite" in one_error_line(invalid, "target_invalid")

    (tmp_path / "broken.yaml").write_text("method: [svgd\n")
    unreadable = parvis_cli(served, tmp_path, "submit", "broken.yaml")
    assert unreadable.returncode == 1 and one_error_line(unreadable, "spec_unreadable")

    nowhere = parvis_cli(served, tmp_path, "jobs", url=f"http://127.0.0.1:{free_port()}")
    assert nowhere.returncode == 1 and one_error_line(nowhere, "connection_failed")

    failing = {"method": "svgd", "num_particles": 10, "steps": 50,
               "target": {"kind": "expression", "dim": 1, "log_prob": "log(-1 - x[0]**2)"}}
    (tmp_path / "failing.yaml").write_text(f"method: svgd\nnum_particles: 10\nsteps: 50\ntarget: "
                                           f"{json.dumps(failing['target'])}\n")
    failed = parvis_cli(served, tmp_path, "submit", "failing.yaml", "--wait", "-q")
    assert failed.returncode == 3 and failed.stdout.strip().startswith("job_")
    assert failed.stderr.strip().splitlines()[-1].endswith("[target_nonfinite]")

    usage = parvis_cli(served, tmp_path, "sample", "smp_x", "-o", "d.npy")  # -n missing
    assert usage.returncode == 2 and "-n" in usage.stderr
    wrong_suffix = parvis_cli(served, tmp_path, "particles", failed.stdout.strip(), "-o", "p.txt")
    assert wrong_suffix.returncode == 1 and one_error_line(wrong_suffix, "job_not_finished")


def test_cancel_and_watch_a_cancelled_job(served: Any, tmp_path: Path) -> None:
    long_spec = {"method": "svgd", "num_particles": 1000, "steps": 1_000_000, "target": GAUSSIAN}
    job_id = parvis_cli(served, tmp_path, "submit", "-", stdin=json.dumps(long_spec)).stdout.strip()
    cancelled = parvis_cli(served, tmp_path, "cancel", job_id)
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(job_id)
    watched = parvis_cli(served, tmp_path, "watch", job_id)
    assert watched.returncode == 3 and watched.stderr.strip().splitlines()[-1].endswith("[cancelled]")
    again = parvis_cli(served, tmp_path, "cancel", job_id)  # idempotent
    assert again.returncode == 0 and again.stdout.split()[:2] == [job_id, "cancelled"]


def test_help_everywhere(served: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = parvis_cli(served, tmp_path, "--help")
    assert top.returncode == 0 and all(command in top.stdout for command in [*CLIENT_COMMANDS, "serve", "keys"])
    for command in CLIENT_COMMANDS:
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([command, "--help"])
        assert exited.value.code == 0
        shown = capsys.readouterr().out
        assert f"usage: parvis {command}" in shown and "--url" in shown and "--api-key" in shown


def _readme_block(heading: str, language: str, index: int = 0) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)[index]


def test_readme_examples_run_as_pasted(served: Any, tmp_path: Path) -> None:
    """The README's client, CLI, try-it and sampler examples, verbatim but for the service's address (the
    README's localhost:8000 is this test's port; `parvis` and the client read it from $PARVIS_URL) and the
    folder of their output files (the README's /tmp/ is this test's tmp_path); they leave nothing else behind."""
    env = client_env(tmp_path, served.url)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `parvis` and `python3`
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the blocks' `source .venv/bin/activate`
    address = served.url.removeprefix("http://")

    def bash(block: str) -> str:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.replace("localhost:8000", address).replace("/tmp/", f"{tmp_path}/")],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout

    tried = bash(_readme_block("Try it", "bash"))
    assert '"shape":[200,2]' in tried.replace(" ", "")
    sampled = bash(_readme_block("Trained samplers: fresh posterior draws on demand", "bash"))
    assert '"samples"' in sampled and np.load(tmp_path / "draws.npy").shape == (10000, 2)
    assert (tmp_path / "sampler.zip").stat().st_size > 0
    bash(_readme_block("Command line", "bash"))
    assert (tmp_path / "particles.csv").read_text().splitlines()[0] == "x[0],x[1]"
    rmse, log_lik, predicted = bash(_readme_block(
        "Bayesian neural networks: predictions, function-space methods, baselines", "bash")).split(maxsplit=2)
    assert float(rmse) > 0 and np.isfinite(float(log_lik)) and len(json.loads(predicted)["mean"]) == 1

    script = (_readme_block("Python client", "python", 0) + _readme_block("Python client", "python", 1)).replace(
        "/tmp/", f"{tmp_path}/")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "target_invalid" and "x[1]" in result.stdout
    written = {path.name for path in tmp_path.iterdir() if not path.name.startswith(".")}  # HOME is tmp_path too
    assert written == {"draws.npy", "sampler.zip", "spec.yaml", "particles.csv"}, written  # all under /tmp/


def test_light_distribution_works_without_torch(served: Any, tmp_path: Path) -> None:
    """`pip install ./clients/python` into a fresh virtualenv (no torch), then the CLI and the client against
    the live service; offline sampling says it needs torch."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in client_env(tmp_path, served.url).items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT / "clients" / "python")],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    if installed.returncode != 0 and "No matching distribution found" in installed.stderr:
        pytest.skip(f"no package index reachable for httpx/numpy/tqdm/pyyaml: {installed.stderr[-300:]}")
    assert installed.returncode == 0, installed.stderr
    listed = subprocess.run([str(venv / "bin" / "parvis"), "methods"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "svgd" in listed.stdout, listed.stderr
    script = (
        "import importlib.util, sys, parvis\n"
        "assert importlib.util.find_spec('torch') is None\n"
        f"assert parvis.__file__.startswith({str(venv)!r}), parvis.__file__\n"
        "job = parvis.Client().wait(parvis.Client().submit({'method': 'svgd', 'num_particles': 20, 'steps': 30, "
        "'target': {'kind': 'gaussian', 'mean': [0.0], 'cov': [[1.0]]}}), progress=False)\n"
        "print(job['status'], parvis.Client().particles(job).shape)\n"
        "try:\n    parvis.load_sampler('missing.zip')\nexcept parvis.ParvisError as e:\n    print(e.code)\n"
        "print('torch' in sys.modules)\n")
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[:3] == ["succeeded (20, 1)", "torch_missing", "False"]


def test_api_keys_from_the_option_the_environment_and_the_client(tmp_path: Path) -> None:
    """A service with authentication on: the key from --api-key, $PARVIS_API_KEY or `api_key=`; none or a
    wrong one is a one-line 401 `unauthorized`."""
    service = ServedParvis(tmp_path / "auth", PARVIS_AUTH_ENABLED="1")
    try:
        service.wait_ready()
        env = client_env(tmp_path)
        env["PARVIS_DATA_DIR"] = str(service.root / "data")
        created = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "acme"], env=env,
                                 capture_output=True, text=True, timeout=120)
        key = created.stdout.strip().splitlines()[-1]
        assert key.startswith("pvs_"), created.stderr

        refused = parvis_cli(service, tmp_path, "jobs")
        assert refused.returncode == 1 and one_error_line(refused, "unauthorized")
        wrong = parvis_cli(service, tmp_path, "jobs", "--api-key", "pvs_wrong_key")
        assert wrong.returncode == 1 and one_error_line(wrong, "unauthorized")
        assert parvis_cli(service, tmp_path, "jobs", "--api-key", key).returncode == 0
        with_env = subprocess.run([sys.executable, "-m", "app.cli", "methods"], cwd=tmp_path,
                                  env={**client_env(tmp_path, service.url), "PARVIS_API_KEY": key},
                                  capture_output=True, text=True, timeout=120)
        assert with_env.returncode == 0 and "svgd" in with_env.stdout

        with parvis.Client(service.url) as anonymous, pytest.raises(parvis.AuthenticationError) as denied:
            anonymous.jobs()
        assert denied.value.code == "unauthorized" and denied.value.status == 401
        with parvis.Client(service.url, api_key=key) as client:
            assert client.jobs() == []
    finally:
        service.stop()
