"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright): `parvis serve` with
authentication on and four short jobs run to completion (SVGD on a 2-D banana, a GPVI generator on it, an SVGD
BNN on 1-D data, SVGD collapsed in d = 40), then /ui: the key is entered once (and survives a reload), the jobs list shows the jobs, the
SVGD page draws the training curves and the particles over the target density, the generator's page draws
fresh samples on request, a collapsed SVGD job's page its warnings and what to try (`next_steps`), the BNN's
page its predictive band; no console error, no request elsewhere. The
screenshot of the SVGD page is written to the test's directory, and to docs/figures/dashboard.png with
PARVIS_UPDATE_DASHBOARD_SCREENSHOT=1 (how the README's picture is made)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.serve import ServedParvis, client_env
from tests.support.stack import wait_for

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("PARVIS_TEST_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "figures" / "dashboard.png"
PARTICLES = 200
BANANA = {"kind": "banana", "dim": 2, "curvature": 0.25, "scale": 2.0}
SPEC = {"method": "svgd", "name": "banana demo", "target": BANANA, "num_particles": PARTICLES, "steps": 2000,
        "seed": 1, "eval": {"every": 100}}
GENERATOR = {"method": "gpvi_exact", "name": "banana generator", "target": BANANA, "num_particles": 32,
             "steps": 200, "seed": 2}
X_1D = np.linspace(-3, 3, 40)
BNN = {"method": "svgd", "name": "1-D BNN", "num_particles": 20, "steps": 300, "seed": 3,
       "target": {"kind": "bnn", "dataset": {"X": X_1D[:, None].tolist(),
                  "y": (np.sin(X_1D) + 0.1 * np.random.default_rng(0).standard_normal(40)).tolist()},
                  "hidden": [20], "noise": {"type": "fixed", "std": 0.1}}}
DRAWS = 500
#: 50 particles in d = 40 with the papers' settings: collapsed, so its job carries warnings and `next_steps`
COLLAPSED = {"method": "svgd", "name": "collapsed", "num_particles": 50, "steps": 300, "seed": 5,
             "target": {"kind": "gaussian", "mean": [0.0] * 40, "cov": np.eye(40).tolist()}}
LIVE = {"method": "svgd", "name": "live", "target": BANANA, "num_particles": 100, "steps": 30000, "seed": 4}


def _playwright():  # noqa: ANN202
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium; scripts/test does it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


def _cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_the_dashboard_shows_a_finished_jobs_curves_and_2d_plot(tmp_path: Path) -> None:
    sync_playwright = _playwright()
    served = ServedParvis(tmp_path, "--auth")
    env, log, base = client_env(tmp_path), served.log, served.url
    client = httpx.Client(base_url=base, timeout=30)
    try:
        served.wait_ready()
        key = _cli("keys", "create", "--tenant", "demo", "--data-dir", str(served.data_dir), env=env)
        auth = {"Authorization": f"Bearer {key}"}
        ids = [client.post("/v1/jobs", json=spec, headers=auth).json()["id"]
               for spec in (GENERATOR, BNN, COLLAPSED, SPEC)]
        for each in ids:
            job = wait_for(lambda j=each: (got := client.get(f"/v1/jobs/{j}", headers=auth).json())["status"] in
                           {"succeeded", "failed"} and got, 300, interval=0.5, what=f"job {each}")
            assert job["status"] == "succeeded", (job["error"], log.read_text())
        generator_id, bnn_id, collapsed_id, job_id = ids
        advice = client.get(f"/v1/jobs/{collapsed_id}", headers=auth).json()["quality"]["next_steps"]
        assert advice, "the collapsed job carries no next_steps"
        steps = len(client.get(f"/v1/jobs/{job_id}/metrics", headers=auth).json()["points"])

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            # The page's own scripts run under its CSP (checked below); Playwright's string predicates
            # (wait_for_function) are evaluated like `eval`, which that CSP rightly refuses, so this context
            # bypasses it.
            page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1, bypass_csp=True)
            problems: list[str] = []
            page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            # A stream or poll the page aborts itself when it leaves a job (net::ERR_ABORTED) is no failure.
            page.on("requestfailed", lambda r: "ERR_ABORTED" in (r.failure or "")
                    or problems.append(f"request failed: {r.url} {r.failure}"))
            page.on("request", lambda r: r.url.startswith(base) or problems.append(f"outside request: {r.url}"))

            page.goto(f"{base}/ui")
            page.fill("input[name=key]", key)  # asked before any data call: no 401 in the console
            page.click("button[type=submit]")
            page.wait_for_selector(f"tr[data-job='{job_id}']")
            page.reload()  # the key was entered once: the list shows again without asking
            row = page.wait_for_selector(f"tr[data-job='{job_id}']")
            assert "succeeded" in row.inner_text() and "banana" in row.inner_text()
            assert page.query_selector("input[name=key]") is None

            row.click()
            page.wait_for_selector("[data-role=density][data-points]", timeout=60_000)
            assert page.url.endswith(f"#/jobs/{job_id}")
            density = page.query_selector("[data-role=density]")
            assert density.get_attribute("data-points") == str(PARTICLES)
            assert density.get_attribute("data-grid") == "96x96"
            metrics = {c.get_attribute("data-metric"): int(c.get_attribute("data-points"))
                       for c in page.query_selector_all(".chart[data-metric]")}
            assert "bandwidth" in metrics and metrics["bandwidth"] >= min(steps, 100), metrics
            assert any("ksd" in name for name in metrics), metrics
            header = page.inner_text("[data-role=header]")
            assert "succeeded" in header and f"step {SPEC['steps']} / {SPEC['steps']}" in header
            # Something was drawn: many distinct colours on the density canvas (the shaded density and the
            # particles), and a curve of several colours on the bandwidth chart.
            colours = """el => { const c = el.querySelector('canvas'); const d = c.getContext('2d')
                .getImageData(0, 0, c.width, c.height).data; const s = new Set();
                for (let i = 0; i < d.length; i += 16) s.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
                return s.size; }"""
            assert density.evaluate(colours) > 50
            assert page.query_selector(".chart[data-metric=bandwidth]").evaluate(colours) > 3
            page.wait_for_timeout(300)
            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)

            page.goto(f"{base}/ui/#/jobs/{generator_id}")  # a generator: its sampler's buttons and fresh draws
            page.wait_for_selector("[data-role=density][data-points='32']", timeout=60_000)
            page.fill("input[name=n]", str(DRAWS))
            page.fill("input[name=seed]", "3")
            page.click("text=Draw samples")
            page.wait_for_selector(f"[data-role=density][data-points='{DRAWS}']", timeout=60_000)
            assert f"{DRAWS} draws of dimension 2" in page.inner_text(".note")
            with page.expect_download() as sampler_zip:
                page.click("text=Download sampler (.zip)")
            page.screenshot(path=str(tmp_path / "generator.png"), full_page=True)
            assert sampler_zip.value.suggested_filename.endswith(".zip")
            assert Path(sampler_zip.value.path()).read_bytes()[:2] == b"PK"

            page.goto(f"{base}/ui/#/jobs/{collapsed_id}")  # a flagged job: its warnings and what to try
            shown = page.wait_for_selector("[data-role=next-steps]", timeout=60_000).inner_text()
            assert "What to try" in shown and all(step in shown for step in advice), shown
            assert "collapsed" in page.inner_text("[data-role=header] .warnings")
            assert page.inner_text("[data-role=verdict]") == "Quality: unreliable"

            page.goto(f"{base}/ui/#/jobs/{bnn_id}")  # 1-D regression: the predictive band
            band = page.wait_for_selector("[data-role=band][data-points='200']", timeout=60_000)
            assert band.evaluate(colours) > 10
            page.screenshot(path=str(tmp_path / "bnn.png"), full_page=True)

            # Live: a longer job seen running in the list, then on its page progress, ETA and a growing curve,
            # and its results once it has finished, without reloading.
            live_id = client.post("/v1/jobs", json=LIVE, headers=auth).json()["id"]
            queued_id = client.post("/v1/jobs", json={**GENERATOR, "name": "waits"}, headers=auth).json()["id"]
            page.goto(f"{base}/ui/#/jobs/{queued_id}")  # one worker, busy with the live job: this one waits
            page.wait_for_selector("[data-role=curves] >> text=No metrics yet.")
            assert page.inner_text("[data-role=header] [data-role=status]") == "queued"
            assert client.post(f"/v1/jobs/{queued_id}/cancel", headers=auth).status_code == 202
            page.wait_for_selector("[data-role=header] >> text=cancelled")  # the page follows it live
            page.goto(f"{base}/ui/#/")
            live_row = f"tr[data-job='{live_id}']"
            page.wait_for_function(f"document.querySelector(\"{live_row} [data-role=status]\")?.textContent "
                                   "=== 'running'", timeout=60_000)
            page.click(live_row)
            curve = "document.querySelector('[data-metric=bandwidth]')"
            page.wait_for_function(f"+{curve}?.dataset.points > 0", timeout=60_000)
            assert page.inner_text("[data-role=header] [data-role=status]") == "running"  # 30,000 steps: ~15 s
            seen = int(page.get_attribute("[data-metric=bandwidth]", "data-points"))
            assert "ETA" in page.inner_text("[data-role=header]")
            page.wait_for_function(f"+{curve}.dataset.points > {seen}", timeout=60_000)
            page.wait_for_selector("[data-role=density][data-points='100']", timeout=120_000)
            assert "succeeded" in page.inner_text("[data-role=header]")
            assert f"step {LIVE['steps']} / {LIVE['steps']}" in page.inner_text("[data-role=header]")
            # Under its Content-Security-Policy (no bypass) the page works and violates nothing: the key form,
            # the job list and a job's plots come up with no console error.
            strict = browser.new_page(viewport={"width": 1280, "height": 900})
            strict.on("console", lambda m: m.type == "error" and problems.append(f"console (CSP on): {m.text}"))
            strict.on("pageerror", lambda e: problems.append(f"page error (CSP on): {e}"))
            strict.goto(f"{base}/ui")
            strict.fill("input[name=key]", key)
            strict.click("button[type=submit]")
            strict.click(f"tr[data-job='{job_id}']")
            strict.wait_for_selector("[data-metric=bandwidth]", timeout=60_000)
            browser.close()
        assert problems == []
        assert shot.stat().st_size > 20_000
        if os.environ.get("PARVIS_UPDATE_DASHBOARD_SCREENSHOT") == "1":
            shutil.copyfile(shot, SCREENSHOT)
    finally:
        client.close()
        served.stop()
