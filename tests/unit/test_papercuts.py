"""Newcomer papercuts (issue 42, item 6), each checked: README blocks that run alone, the SPDX license, honest
`grad_evals` for the function-space methods, the KSD² note, the CLI's help, the worker's torch threads.
(Subprocess checks of the CLI and a real worker: tests/integration/test_papercuts_cli.py.)"""

from __future__ import annotations

import ast
import builtins
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from app.cli import build_parser
from inference_core import run
from parvis.cli import KSD_NOTE, job_notes
from service.settings import Settings
from tests.unit.function_space.fpovi_support import regression_target_spec

ROOT = Path(__file__).resolve().parents[2]
CONTINUES = "continues the previous block"


# ---- README blocks run pasted alone ---------------------------------------------------------------------------

def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every ```bash / ```python block, in order."""
    return re.findall(r"```(bash|python)\n(.*?)```", text, flags=re.S)


def continues(code: str) -> bool:
    first = next((line for line in code.splitlines() if line.strip()), "")
    return first.lstrip().startswith("#") and CONTINUES in first


def bash_names(code: str) -> tuple[set[str], set[str]]:
    """(variables assigned, variables expanded) of a shell block; heredoc bodies are scanned as well."""
    assigned = set(re.findall(r"(?:^|[\s;(])(?:export\s+)?([A-Za-z_]\w*)=", code, flags=re.M))
    assigned |= set(re.findall(r"\bfor\s+([A-Za-z_]\w*)\s+in\b", code))
    used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", code))
    return assigned, used


def python_names(code: str) -> tuple[set[str], set[str]]:
    tree = ast.parse(code)
    assigned = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            assigned |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.ExceptHandler) and node.name:
            assigned.add(node.name)
        elif isinstance(node, ast.arg):
            assigned.add(node.arg)
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return assigned, used - set(dir(builtins))


def leaked_names(text: str) -> list[str]:
    """'block N uses X' for each variable a block uses that only an earlier block defines, unless the block's
    first line says it continues the previous one."""
    problems: list[str] = []
    earlier: dict[str, set[str]] = {"bash": set(), "python": set()}
    for index, (language, code) in enumerate(fenced_blocks(text)):
        assigned, used = (bash_names if language == "bash" else python_names)(code)
        if not continues(code):
            problems += [f"{language} block {index} uses {name}, defined only in an earlier block"
                         for name in sorted((used - assigned) & earlier[language])]
        earlier[language] |= assigned
    return problems


def test_every_readme_block_runs_alone_or_says_it_continues() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(fenced_blocks(text)) >= 8
    assert leaked_names(text) == []


def test_the_block_check_catches_a_variable_from_an_earlier_block() -> None:
    before = "```bash\nSAMPLER=$(parvis status job --field sampler_id)\n```\n"
    after = "```bash\ncurl -s localhost:8000/v1/samplers/$SAMPLER/sample\n```\n"
    assert leaked_names(before + after) == ["bash block 1 uses SAMPLER, defined only in an earlier block"]
    marked = f"```bash\n# {CONTINUES}: $SAMPLER\ncurl -s localhost:8000/v1/samplers/$SAMPLER/sample\n```\n"
    assert leaked_names(before + marked) == []
    python = "```python\nclient = make()\n```\n```python\nprint(client)\n```\n"
    assert leaked_names(python) == ["python block 1 uses client, defined only in an earlier block"]


def test_readme_blocks_write_no_files_into_the_checkout() -> None:
    """Outputs go to /tmp (tests/integration/test_cli.py runs the blocks and lists what they wrote)."""
    for language, code in fenced_blocks((ROOT / "README.md").read_text()):
        if language == "bash":
            targets = re.findall(r"(?:\s-o\s+|>\s*)([^\s|;&]+)", code)
            targets = [t for t in targets if t not in {"/dev/null", "&1", "&2"}]
            assert all(t.startswith("/tmp/") for t in targets), targets


# ---- pyproject: SPDX license, no setuptools warnings ------------------------------------------------------------

@pytest.mark.parametrize("pyproject", ["pyproject.toml", "clients/python/pyproject.toml"])
def test_license_is_an_spdx_string_with_a_setuptools_that_reads_it(pyproject: str) -> None:
    data = tomllib.loads((ROOT / pyproject).read_text())
    assert data["project"]["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in data["project"].get("classifiers", []))
    (requirement,) = [r for r in data["build-system"]["requires"] if r.startswith("setuptools")]
    assert requirement == "setuptools>=77"


def test_building_the_metadata_prints_no_license_warning(tmp_path: Path) -> None:
    """setuptools (the venv's, ≥ 77) builds the distribution's metadata from the real pyproject.toml without a
    word about `project.license`, and writes the SPDX License-Expression."""
    pytest.importorskip("setuptools", minversion="77")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "README.md").write_text("readme\n")
    for package in ("app", "service", "workers", "inference_core", "parvis"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    out = tmp_path / "meta"
    out.mkdir()
    built = subprocess.run([sys.executable, "-W", "always", "-c",
                            f"from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel("
                            f"{str(out)!r}))"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    assert "license" not in (built.stdout + built.stderr).lower(), built.stderr
    metadata = (out / built.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata


# ---- grad_evals of the function-space methods ----------------------------------------------------------------

def test_fsvgd_counts_one_evaluation_per_particle_per_step() -> None:
    n, steps = 5, 4
    result = run({"method": "fsvgd", "num_particles": n, "steps": steps, "seed": 0,
                  "target": regression_target_spec(hidden=[4])})
    assert result.evaluations_spent == n * steps  # one likelihood gradient per particle's function per step
    assert result.final_metrics["grad_evals"] == n * steps


def fvi_job(target: dict, steps: int, distill: int) -> dict:
    return {"method": "fvi", "seed": 3, "num_particles": 4, "steps": steps, "target": target,
            "options": {"distill_steps": distill, "n_basis": 4, "latent_dim": 2, "distill_functions": 8,
                        "distill_points": 10}}


def test_fvi_counts_its_posterior_draws_and_none_while_distilling() -> None:
    x = [[v] for v in torch.linspace(-1, 1, 30).tolist()]
    y = [float(torch.sin(torch.tensor(2 * v[0]))) for v in x]
    fixed = {"kind": "function_posterior", "dataset": {"X": x, "y": y}, "prior": {"type": "gp", "lengthscale": 0.5},
             "likelihood": {"noise_std": 0.1}, "standardize": True}
    assert run(fvi_job(fixed, steps=7, distill=4)).evaluations_spent == 3  # 3 posterior steps × 1 draw of q
    assert run(fvi_job(fixed, steps=4, distill=4)).evaluations_spent == 0  # distillation: the prior only
    learnt = {"kind": "bnn", "dataset": {"X": x, "y": y}, "hidden": [6], "standardize": True}
    # a learnt noise holds out 10 % of the rows (noise_holdout) whose 8 predictive draws calibrate σ_π each step
    assert run(fvi_job(learnt, steps=7, distill=4)).evaluations_spent == 3 * (1 + 8)


# ---- KSD² note where users see it ------------------------------------------------------------------------------

def test_a_negative_ksd_imq_comes_with_its_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unbiased" in KSD_NOTE and "negative" in KSD_NOTE
    job = {"id": "job_1", "status": "succeeded", "metrics": {"ksd_imq": -0.006}}
    assert job_notes(job) == [f"  note: {KSD_NOTE}"]
    assert job_notes({**job, "metrics": {"ksd_imq": 0.4}}) == []
    for command in ("status", "watch"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        assert "unbiased U-statistic" in " ".join(capsys.readouterr().out.split())
    script = (ROOT / "app" / "ui" / "static" / "app.js").read_text()
    assert re.search(r"ksd_imq: \"KSD² estimated by an unbiased U-statistic: it can dip slightly below 0", script)
    assert "ksd_imq" in (api := (ROOT / "docs" / "api.md").read_text()) and "can be slightly negative" in api


# ---- `parvis --help` ---------------------------------------------------------------------------------------------

def test_server_commands_have_descriptions_and_auth_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    top = capsys.readouterr().out
    for command in ("serve", "api", "worker", "db", "keys"):
        line = re.search(rf"^\s+{command}\s+(\S.*)$", top, flags=re.M)
        assert line and len(line.group(1)) > 10, (command, top)
    for command in ("serve", "api", "worker"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        shown = capsys.readouterr().out
        description = shown.split("\n\n")[1]
        assert not description.startswith(("options:", "positional")), shown
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--auth require an API key on every request" in shown
    assert "--no-auth no API keys" in shown and "--port PORT port to listen on" in shown


# ---- the worker's torch threads ----------------------------------------------------------------------------------

def test_torch_threads_default_leaves_a_core_and_shares_the_rest() -> None:
    from workers.context import torch_threads

    cores = len(__import__("os").sched_getaffinity(0))
    assert torch_threads(Settings(worker_torch_threads=3), concurrency=2) == 3
    assert torch_threads(Settings(), concurrency=1) == max(1, cores - 1)
    assert torch_threads(Settings(), concurrency=cores * 4) == 1


def test_the_pool_child_init_applies_the_setting() -> None:
    """workers.signals' worker_process_init handler, in a fresh process (it sets torch's process-wide count)."""
    script = ("import torch, workers.signals as s\n"
              "from celery.signals import worker_process_init\n"
              "worker_process_init.send(sender=None)\n"
              "print(torch.get_num_threads())\n")
    env = {**__import__("os").environ, "PARVIS_WORKER_TORCH_THREADS": "3"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "3"
    assert json.loads(Settings(worker_torch_threads=2).model_dump_json())["worker_torch_threads"] == 2
