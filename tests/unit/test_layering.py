"""The floors (docs/architecture.md): inference_core imports no web, queue or database code; `service` (the floor
of API and workers) imports neither `app`, `workers` nor torch; `app` may import `service` and the core, never
`workers`; `workers` and the migrations (service/migrations) may import `service` and the core, never `app`. The API never loads the
training code (torch only for /sample, through the samplers' start-up warm-up)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import inference_core

FORBIDDEN = {"fastapi", "starlette", "celery", "kombu", "sqlalchemy", "alembic", "redis", "psycopg", "uvicorn",
             "app", "workers", "httpx"}
ROOT = Path(inference_core.__file__).parent
REPO = ROOT.parent


def imported_names(package: str) -> list[tuple[str, str]]:
    """(file, imported module) for every import statement in a package, function-level ones included."""
    found = []
    for path in (REPO / package).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(str(path.relative_to(REPO)), alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((str(path.relative_to(REPO)), node.module))
    return found


def offenders(package: str, forbidden: set[str]) -> list[str]:
    return [f"{path}: {name}" for path, name in imported_names(package) if name.split(".")[0] in forbidden]


def test_inference_core_sources_import_nothing_forbidden() -> None:
    assert offenders("inference_core", FORBIDDEN | {"service", "migrations", "parvis"}) == []


def test_service_imports_neither_app_workers_nor_torch() -> None:
    """The floor is torch-free: it may use the core's torch-free parts (spec, catalog, data-set parsing), checked
    both in the source and by importing every service module and looking for torch."""
    assert offenders("service", {"app", "workers", "torch"}) == []
    modules = sorted(f"service.{p.stem}" for p in (REPO / "service").glob("*.py") if p.stem != "__init__")
    modules += sorted(f"service.{p.parent.name}.{p.stem}" for p in (REPO / "service").glob("*/*.py")
                if p.parent.name != "migrations")  # Alembic's env.py runs only under Alembic
    loaded = _modules_after("import " + ", ".join(modules))
    assert "sqlalchemy" in loaded
    assert loaded & {"torch", "app", "workers"} == set()


def test_app_never_imports_workers_and_workers_never_import_app() -> None:
    assert offenders("app", {"workers"}) == []
    assert offenders("workers", {"app"}) == []


def _modules_after(code: str, top_level: bool = True) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         check=True, capture_output=True, text=True)
    return {name.split(".")[0] if top_level else name for name in out.stdout.split()}


def test_importing_the_training_loop_loads_no_service_code() -> None:
    loaded = _modules_after("import inference_core.training, inference_core.methods.svgd, inference_core.kernels")
    assert "torch" in loaded
    assert loaded & FORBIDDEN == set()


def test_the_api_process_never_imports_the_training_code() -> None:
    """The API sends tasks by name: after submits, lists and the start-up warm-up (which imports torch and the
    samplers for /sample), no training loop, method, kernel backend or worker module is loaded."""
    loaded = _modules_after(
        "from app.main import create_app\nfrom fastapi.testclient import TestClient\n"
        "import tempfile\nfrom service.settings import Settings\n"
        "d = tempfile.mkdtemp()\nfrom service.migrate import upgrade\ns = Settings(data_dir=d)\nupgrade(s.database_url)\n"
        "c = TestClient(create_app(s)).__enter__()\n"
        "c.post('/v1/jobs', json={'method': 'svgd', 'target': {'kind': 'gaussian', 'mean': [0], 'cov': [[1]]}})\n"
        "c.get('/v1/methods'); c.get('/v1/jobs')\n"
        "assert c.app.state.compute.warm.wait(120)",
        top_level=False,
    )
    assert "fastapi" in loaded and "inference_core.samplers" in loaded
    training = sorted(name for name in loaded
                      if name.split(".")[0] == "workers" or name.startswith(("inference_core.training",
                                                                              "inference_core.methods")))
    assert training == []


def test_the_client_package_imports_no_torch_and_no_service_code() -> None:
    """`parvis` (the client) is distributed without torch (clients/python): importing it and its CLI loads
    neither torch nor the service's packages; `load_sampler` imports inference_core only when called."""
    loaded = _modules_after("import parvis, parvis.cli, parvis.export\nparvis.cli.build_parser()")
    assert "httpx" in loaded and "numpy" in loaded
    assert loaded & {"torch", "inference_core", "app", "workers", "fastapi", "sqlalchemy", "celery", "arviz"} == set()


#: The core's modules that import no torch: what API modules other than app/api/compute.py may use.
TORCH_FREE_CORE = ("inference_core", "inference_core.spec", "inference_core.catalog", "inference_core.errors",
                   "inference_core.datasets", "inference_core.datasets.columns", "inference_core.datasets.resolve")


def test_only_the_compute_module_of_the_api_touches_torch() -> None:
    """app/api/compute.py owns every torch call the API makes (validate, density, predict, sample); no other API
    module imports torch or any core module beyond the torch-free ones, which import no torch themselves."""
    others = [(path, name) for path, name in imported_names("app") if path != "app/api/compute.py"]
    assert [f"{p}: {n}" for p, n in others if n.split(".")[0] == "torch"] == []
    core = sorted({n for _, n in others if n.split(".")[0] == "inference_core"})
    assert set(core) <= set(TORCH_FREE_CORE), core
    assert "torch" not in _modules_after("import " + ", ".join(TORCH_FREE_CORE))


def test_the_tenant_filter_is_written_in_the_repositories_only() -> None:
    """Routes speak no SQL and import no other route; the `tenant_id ==` filter is written in service/repositories/
    and service/api_keys.py (which finds a key's tenant), nowhere else."""
    for path in (REPO / "app" / "api" / "routes").glob("*.py"):
        text = path.read_text()
        assert "sqlalchemy" not in text, path.name
        assert "from app.api.routes" not in text, path.name
    filtered = sorted(str(path.relative_to(REPO)) for package in ("app", "service", "workers")
                      for path in (REPO / package).rglob("*.py") if "tenant_id ==" in path.read_text())
    assert all(p.startswith("service/repositories/") or p == "service/api_keys.py" for p in filtered), filtered
    assert "service/repositories/jobs.py" in filtered
