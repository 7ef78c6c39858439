"""`next_steps` of the quality block (metrics/next_steps.py): which remedy answers which warning, for which
method. That following the advice works is tested where the advice is raised (`svgd` collapsed at d = 50, then
`auto`: tests/unit/auto/test_auto_method.py)."""

from __future__ import annotations

from types import SimpleNamespace

from inference_core.metrics.next_steps import (
    AUTO_REMEDIES,
    TRY_AUTO_FOR_DRAWS,
    TRY_AUTO_FOR_PARTICLES,
    next_steps,
)
from inference_core.metrics.quality import with_sampler_certificate


def _remedy(code: str) -> str:
    return next(remedy for answers, remedy in AUTO_REMEDIES if code in answers)


def test_auto_gets_one_remedy_per_kind_of_trouble_in_a_fixed_order() -> None:
    auto = SimpleNamespace(name="auto")
    assert next_steps(auto, []) == []
    codes = ["not_converged", "mode_weights", "starts_disagree", "heavy_tails"]
    assert next_steps(auto, codes) == [_remedy("starts_disagree"), _remedy("heavy_tails"), _remedy("not_converged")]
    assert "`steps`" in _remedy("not_converged") and "`num_particles`" in _remedy("collapsed")
    assert _remedy("estimates_disagree") == _remedy("stuck_chains") and "`options.flow.steps`" in _remedy("stuck_chains")


def test_particle_methods_are_sent_to_auto_only_where_auto_takes_their_target() -> None:
    gaussian = SimpleNamespace(dim=50, initial_particles=None)
    svgd = SimpleNamespace(name="svgd", target=gaussian, auto_remedy="particles")
    assert next_steps(svgd, ["collapsed"]) == [TRY_AUTO_FOR_PARTICLES]
    assert next_steps(svgd, []) == []
    whitened = SimpleNamespace(name="svgd", target=gaussian, auto_remedy="particles")
    assert next_steps(whitened, ["ksd_rejects"]) == [TRY_AUTO_FOR_PARTICLES]
    network = SimpleNamespace(dim=5000, initial_particles=lambda *a: None)  # a BNN's weights: prediction.md
    assert next_steps(SimpleNamespace(name="svgd", target=network, auto_remedy="particles"), ["collapsed"]) == []
    too_large = SimpleNamespace(dim=2001, initial_particles=None)
    assert next_steps(SimpleNamespace(name="svgd", target=too_large, auto_remedy="particles"), ["collapsed"]) == []
    assert next_steps(SimpleNamespace(name="nuts", target=gaussian, auto_remedy=None), ["not_converged"]) == []
    assert next_steps(SimpleNamespace(name="gpvi", target=network, auto_remedy="draws"), ["ksd_rejects"]) == []
    assert next_steps(SimpleNamespace(name="gpvi", target=gaussian, auto_remedy="draws"), ["ksd_rejects"]) == [TRY_AUTO_FOR_DRAWS]


def test_an_unreliable_sampler_certificate_adds_the_advice_once_and_only_where_auto_applies() -> None:
    report = {"warnings": [], "next_steps": [], "verdict": "good", "trustworthy": True, "checks": ["ksd_test"]}
    unreliable = {"verdict": "unreliable", "reason": "k̂ 0.9"}
    gpvi = SimpleNamespace(name="gpvi", target=SimpleNamespace(dim=2, initial_particles=None), auto_remedy="draws")
    merged = with_sampler_certificate(report, unreliable, gpvi)
    assert merged["next_steps"] == [TRY_AUTO_FOR_DRAWS] and merged["verdict"] == "unreliable"
    assert report["next_steps"] == []  # a new dict
    already = {**report, "warnings": [{"code": "ksd_rejects", "message": "m"}], "next_steps": [TRY_AUTO_FOR_DRAWS]}
    assert with_sampler_certificate(already, unreliable, gpvi)["next_steps"] == [TRY_AUTO_FOR_DRAWS]
    assert with_sampler_certificate(report, {"verdict": "usable with correction"}, gpvi)["next_steps"] == []
    on_a_network = SimpleNamespace(name="gpvi", target=SimpleNamespace(dim=500, initial_particles=lambda *a: None),
                                   auto_remedy="draws")
    assert with_sampler_certificate(report, unreliable, on_a_network)["next_steps"] == []
