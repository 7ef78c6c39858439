"""Issue 42, "In the core": the preconditioning tools live outside `methods.auto`, one KSD critic serves `ksd` and
`amortized_ksd`, one spelling of a kernel's bandwidth (`options.kernel.bandwidth`, the former ones still accepted
and normalised), optional method hooks declared on the base classes, and each method's memory rule registered
next to its options (inference_core.memory dispatches through them, with the values it had before)."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest
import torch

import inference_core
from inference_core import errors
from inference_core.catalog import METHODS, resolve
from inference_core.memory import MEMORY_RULES, PAIRWISE_SCRATCH_BYTES, job_memory_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import build_method, run

ROOT = Path(inference_core.__file__).parent
REPO = ROOT.parent
GAUSSIAN = {"kind": "gaussian", "mean": [0.5, -1.0, 0.0], "cov": [[2.0, 0.3, 0.0], [0.3, 1.0, 0.0], [0.0, 0.0, 0.5]]}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


# -- 1. preconditioning ---------------------------------------------------------------------------------------

def test_the_method_bases_import_nothing_from_auto() -> None:
    for path in (ROOT / "methods" / "base.py", ROOT / "methods" / "generative" / "base.py"):
        assert [m for m in _imports(path) if m.startswith("inference_core.methods.auto")] == [], path
        assert any(m.startswith("inference_core.preconditioning") for m in _imports(path)), path


def test_only_auto_itself_imports_methods_auto_and_pathfinder_transport_modes_moved() -> None:
    auto = ROOT / "methods" / "auto"
    outside = [(str(p.relative_to(REPO)), m) for p in ROOT.rglob("*.py") if auto not in p.parents
               for m in _imports(p) if m.startswith("inference_core.methods.auto")]
    assert outside == []
    for folder in ("tests", "benchmarks"):
        moved = [(str(p.relative_to(REPO)), m) for p in (REPO / folder).rglob("*.py") for m in _imports(p)
                 if m.startswith(("inference_core.methods.auto.pathfinder", "inference_core.methods.auto.transport",
                                  "inference_core.methods.auto.modes"))]
        assert moved == []
    assert not any((auto / f"{name}.py").exists() for name in ("pathfinder", "transport", "modes"))
    assert METHODS["auto"].builder == "inference_core.methods.auto.method:Auto"


# -- 2. one KSD critic ------------------------------------------------------------------------------------------

def test_ksd_and_amortized_ksd_train_the_same_critic_class_with_one_options_schema() -> None:
    from inference_core.methods.critic import KSDCritic
    from inference_core.schemas.generative import AmortizedKSDOptions
    from inference_core.schemas.methods import CriticOptions, KSDOptions

    assert KSDOptions.model_fields["critic"].annotation is CriticOptions
    assert AmortizedKSDOptions.model_fields["critic"].annotation is CriticOptions
    for name in ("ksd", "amortized_ksd"):
        method = build_method(validate_job_spec({"method": name, "target": GAUSSIAN, "num_particles": 8, "steps": 2,
                                                 "options": {"critic": {"hidden": [5]}}}))
        assert type(method.critic) is KSDCritic
        method.step()
        state = method.state_dict()
        assert set(state["critic"]) == set(method.critic.network.state_dict()) and state["critic_optimizer"]["state"]
    # the one training loop lives in methods/critic.py: neither method computes the critic loss itself
    for path in (ROOT / "methods" / "ksd.py", ROOT / "methods" / "generative" / "amortized.py"):
        assert "stein_critic_loss" not in path.read_text()


def test_each_method_keeps_its_critic_defaults_and_the_former_lr_spelling_is_moved() -> None:
    from inference_core.schemas.generative import AmortizedKSDOptions
    from inference_core.schemas.methods import KSDOptions

    assert KSDOptions().critic.hidden == [100, 100]
    assert KSDOptions.model_validate({"critic": {"steps": 3}}).critic.hidden == [100, 100]
    assert AmortizedKSDOptions().critic.hidden == [100]
    assert AmortizedKSDOptions.model_validate({"critic": {"steps": 3}}).critic.hidden == [100]
    for options in (KSDOptions(), AmortizedKSDOptions()):
        assert (options.critic.optimizer.name, options.critic.optimizer.lr) == ("adam", 1e-3)
    old = validate_job_spec({"method": "ksd", "target": GAUSSIAN, "options": {"critic": {"lr": 0.01}}}).options
    new = validate_job_spec({"method": "ksd", "target": GAUSSIAN,
                             "options": {"critic": {"optimizer": {"lr": 0.01}}}}).options
    assert old == new and old["critic"]["optimizer"]["lr"] == 0.01 and "lr" not in old["critic"]
    with pytest.raises(errors.MethodOptionsInvalid, match="once"):
        validate_job_spec({"method": "ksd", "target": GAUSSIAN,
                           "options": {"critic": {"lr": 0.01, "optimizer": {"lr": 0.1}}}})


# -- 3. one bandwidth spelling --------------------------------------------------------------------------------

BANDWIDTH_SPELLINGS = [
    ("amortized_svgd", {"bandwidth": {"rule": "fixed", "value": 2.5}}, {"kernel": {"bandwidth": {"rule": "fixed", "value": 2.5}}}),
    ("amortized_gfsf", {"bandwidth": {"divisor": "log_n_squared"}}, {"kernel": {"bandwidth": {"divisor": "log_n_squared"}}}),
    ("gpvi", {"bandwidth": {"divisor": "none"}, "precondition": "none"},
     {"kernel": {"bandwidth": {"divisor": "none"}}, "precondition": "none"}),
    ("svgd_subset", {"subset_size": 5, "bandwidth": {"source": "kernel"}, "kernel": {"name": "imq"}},
     {"subset_size": 5, "kernel": {"name": "imq", "bandwidth": {"source": "kernel"}}}),
    ("svgd_induced", {"subset_size": 5, "bandwidth": {"divisor": "log_n"}},
     {"subset_size": 5, "kernel": {"bandwidth": {"cross_divisor": "log_n"}}}),
]


@pytest.mark.parametrize(("method", "old", "new"), BANDWIDTH_SPELLINGS, ids=[c[0] for c in BANDWIDTH_SPELLINGS])
def test_the_deprecated_bandwidth_spelling_is_normalised_to_kernel_bandwidth(method, old, new) -> None:
    def spec(options):
        return {"method": method, "target": GAUSSIAN, "num_particles": 10, "steps": 3, "seed": 2, "options": options}

    stored_old, stored_new = validate_job_spec(spec(old)), validate_job_spec(spec(new))
    assert stored_old.options == stored_new.options and "bandwidth" not in stored_old.options
    assert "bandwidth" in stored_old.options["kernel"]
    again = validate_job_spec(stored_old.model_dump(mode="json"))  # what the worker validates once more
    assert again.options == stored_old.options
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the deprecated field is never read
        a, b = run(spec(old)), run(spec(new))
    assert torch.equal(a.method.particles(), b.method.particles())
    both = {**new, "bandwidth": old["bandwidth"]}
    with pytest.raises(errors.MethodOptionsInvalid, match="once"):
        validate_job_spec(spec(both))


def test_the_deprecated_spellings_are_marked_in_the_option_schemas() -> None:
    for name in ("gpvi", "gpvi_exact", "amortized_svgd", "amortized_gfsf", "svgd_subset", "svgd_induced_adversarial"):
        schema = METHODS[name].schema.model_json_schema()
        assert schema["properties"]["bandwidth"]["deprecated"] is True, name
        assert "Deprecated: use options.kernel.bandwidth" in schema["properties"]["bandwidth"]["description"]
        assert "kernel" in schema["properties"], name
    critic = METHODS["ksd"].schema.model_json_schema()["$defs"]["CriticOptions"]["properties"]["lr"]
    assert critic["deprecated"] is True


# -- 4. hooks -----------------------------------------------------------------------------------------------

def test_the_optional_hooks_are_declared_on_the_base_and_never_probed() -> None:
    from inference_core.methods.base import Method

    for hook in ("converged", "converged_step", "redraw_nonfinite_start", "diagnostics", "quality", "fit_metrics",
                 "sampler", "auto_remedy"):
        assert hasattr(Method, hook), hook
    probes = ("redraw_nonfinite_start", "converged", "diagnostics", "quality", "moved", "sampler")
    for path in [ROOT / "training.py", *(ROOT / "metrics").rglob("*.py"), *(ROOT / "prediction").rglob("*.py"),
                 *(ROOT / "samplers").rglob("*.py")]:
        text = path.read_text()
        for hook in probes:
            assert f'getattr(method, "{hook}"' not in text and f'hasattr(method, "{hook}"' not in text, (path, hook)
    method = build_method(validate_job_spec({"method": "svgd", "target": GAUSSIAN, "num_particles": 6}))
    assert (method.converged, method.converged_step, method.diagnostics(), method.quality()) == (False, None, {}, {})
    assert method.auto_remedy == "particles"


# -- 5. memory rules ----------------------------------------------------------------------------------------

#: job_memory_bytes(method, family, options, n=100, d=10) before the rules moved next to the options (recorded
#: with the former `if method == ...` chains).
RECORDED = {
    ("auto", "{}"): 268563456, ("svgd", "{}"): 268659456, ("gfsf", "{}"): 269059456,
    ("gfsf", "cg"): 268659456, ("ksd", "{}"): 268499456, ("wsgld", "{}"): 268659456,
    ("svgd_subset", "{}"): 268499456, ("svgd_subset", "kernel"): 268659456, ("gpvi", "{}"): 270169312,
    ("gpvi", "pairwise"): 334174880, ("gpvi", "n'=50"): 269916512, ("gpvi_exact", "{}"): 269854880,
    ("amortized_svgd", "{}"): 269534880, ("amortized_svgd", "n'=30"): 269180960, ("amortized_gfsf", "{}"): 269934880,
    ("amortized_ksd", "{}"): 269534880, ("amortized_fsvgd", "{}"): 269534880, ("fsvgd", "{}"): 268659456,
    ("fvi", "{}"): 268499456, ("mfvi", "{}"): 268499456, ("ensemble", "{}"): 268499456, ("nuts", "{}"): 268563456,
}
VARIANTS = {"{}": {}, "cg": {"solve_method": "cg"}, "kernel": {"bandwidth": {"source": "kernel"}},
            "pairwise": {"helper": "pairwise"}, "n'=50": {"expectation_particles": 50},
            "n'=30": {"expectation_particles": 30}}


def closed_form(method: str, options: dict, n: int, d: int) -> float:
    """The estimate written out in float64 (inference_core.memory's constants: 16 [n, d] copies, 4 n² exact-median
    arrays, 5 n² float64 solve arrays; generators: 4 parameter copies, 8 activation copies, k = min(d, 64))."""
    itemsize = 8.0 if method in ("auto", "nuts") else 4.0
    scratch = float(PAIRWISE_SCRATCH_BYTES)
    if METHODS[method].family != "generative":
        total = 16.0 * n * d * itemsize
        exact = method in ("svgd", "gfsf", "wsgld", "fsvgd") or options == VARIANTS["kernel"]
        total += 4.0 * n * n * itemsize if exact else 0.0
        if method == "gfsf" and options.get("solve_method") != "cg":
            total += 5.0 * n * n * 8.0
        return total + scratch
    k = float(min(d, 64))
    widths = [k, 64.0, 64.0, float(d)]
    params = sum((a + 1.0) * b for a, b in zip(widths[:-1], widths[1:], strict=True))
    expectation = float(options.get("expectation_particles", n))
    total = 4.0 * params * itemsize + 8.0 * (n + expectation) * (d + sum(widths)) * itemsize
    if method == "gpvi_exact":
        total += 8.0 * n * k * d * itemsize
    if method == "gpvi" and options.get("helper") == "pairwise":
        total += 8.0 * n * expectation * (k + 3.0 * 2.0 * 32.0) * itemsize
    elif method == "gpvi":
        total += 4.0 * ((k + 1.0) * 32.0 + 33.0 * k * k) * itemsize + 8.0 * n * (k * k + 8.0 * k) * itemsize
    if method == "amortized_gfsf":
        total += 5.0 * n * n * 8.0
    return total + scratch


@pytest.mark.parametrize(("method", "variant"), sorted(RECORDED))
def test_the_memory_rules_give_the_recorded_values_and_the_closed_form(method: str, variant: str) -> None:
    info = METHODS[method]
    options = info.schema.model_validate(VARIANTS[variant])
    value = job_memory_bytes(method, info.family, options, 100, 10)
    assert value == RECORDED[(method, variant)]
    assert float(value) == closed_form(method, VARIANTS[variant], 100, 10)


def test_memory_dispatches_through_the_schemas_not_method_names() -> None:
    from inference_core.schemas.generative import GenerativeOptions, GPVIExactOptions, GPVIOptions
    from inference_core.schemas.methods import GFSFOptions

    assert {GenerativeOptions, GPVIOptions, GPVIExactOptions, GFSFOptions} <= set(MEMORY_RULES)
    source = (ROOT / "memory.py").read_text()
    assert 'method == "' not in source and "family ==" not in source


def test_the_critic_is_built_where_the_methods_resolve() -> None:
    """Both methods construct through the catalog's builders (resolve) with the critic of their default options."""
    from inference_core.targets import build_target

    for name in ("ksd", "amortized_ksd"):
        info = METHODS[name]
        method = resolve(info.builder)(build_target(GAUSSIAN), info.schema(), 4, 0, torch.device("cpu"))
        assert method.critic.options.hidden == ([100, 100] if name == "ksd" else [100])
