"""The client commands of `parvis` (submit, status, watch, cancel, jobs, sample, particles, download, methods,
targets). They join the server commands in `app.cli` under the same entry point; the light `parvis-client`
distribution runs them alone through `main` here.

Exit status: 0 success, 1 an error from the service or the client (one line on stderr with its problem
code), 2 a usage error, 3 a waited-for job that failed or was cancelled.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

EXIT_ERROR = 1
EXIT_JOB_FAILED = 3


def _client(args: argparse.Namespace) -> Any:
    from parvis.client import Client

    return Client(args.url, args.api_key)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


KSD_NOTE = ("ksd_imq estimates the squared kernel Stein discrepancy KSD² with an unbiased U-statistic, so it "
            "can be slightly negative when the draws fit the target well (the true KSD² is ≥ 0 and near 0); "
            "only values clearly above 0 signal a misfit.")


def job_notes(job: dict[str, Any]) -> list[str]:
    """The lines under a job's summary: its quality notes, and why a negative KSD² estimate is not an error."""
    from parvis.progress import quality_notes

    metrics = job.get("metrics") or {}
    negative = any(isinstance(metrics.get(name), int | float) and metrics[name] < 0 for name in ("ksd_imq",))
    return [*quality_notes(job), *([f"  note: {KSD_NOTE}"] if negative else [])]


def _wait(client: Any, job_id: str, args: argparse.Namespace) -> dict[str, Any]:
    from parvis.progress import describe

    job = client.wait(job_id, progress=not args.quiet, raise_on_failure=False)
    print("\n".join([describe(job), *job_notes(job)]), file=sys.stderr)
    return job


def _job_exit(job: dict[str, Any]) -> int:
    if job["status"] == "succeeded":
        return 0
    error = job.get("error") or {}
    code = error.get("code") or job["status"]
    print(f"parvis: job {job['id']} {job['status']}: {error.get('detail') or job['status']} [{code}]",
          file=sys.stderr)
    return EXIT_JOB_FAILED


def cmd_submit(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.submit(args.spec, idempotency_key=args.idempotency_key)
        if args.wait:
            job = _wait(client, job["id"], args)
        print(job["id"])
        return _job_exit(job) if args.wait else 0


def cmd_status(args: argparse.Namespace) -> int:
    from parvis.progress import describe

    with _client(args) as client:
        job = client.job(args.job)
    if args.field:
        value = job
        for part in args.field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        print("" if value is None else value if not isinstance(value, dict | list) else json.dumps(value))
    elif args.json:
        _print_json(job)
    else:
        print("\n".join([describe(job), *job_notes(job)]))
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _job_exit(_wait(client, args.job, args))


def cmd_cancel(args: argparse.Namespace) -> int:
    from parvis.progress import describe

    with _client(args) as client:
        print(describe(client.cancel(args.job)))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        jobs = client.jobs(status=args.status, limit=args.limit)
    if args.json:
        _print_json(jobs)
        return 0
    print("\t".join(("id", "status", "method", "step", "created", "sampler")))
    for job in jobs:
        progress = job.get("progress") or {}
        print("\t".join((job["id"], job["status"], job["method"],
                         f"{progress.get('step', 0)}/{progress.get('total_steps', '?')}", job["created_at"],
                         job.get("sampler_id") or "-")))
    return 0


def _read_inputs(path: str | None) -> Any:
    if path is None:
        return None
    import numpy as np

    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    return np.loadtxt(path, delimiter=",", ndmin=2)


def cmd_sample(args: argparse.Namespace) -> int:
    from parvis.export import save_draws

    with _client(args) as client:
        draws = client.sampler(args.sampler).sample(args.n, seed=args.seed, x=_read_inputs(args.x))
    save_draws(draws, args.output)
    print(f"{args.output}: {draws.shape[0]} draws of shape {list(draws.shape[1:])} (seed {args.seed})",
          file=sys.stderr)
    return 0


def cmd_particles(args: argparse.Namespace) -> int:
    from parvis.export import save_draws

    with _client(args) as client:
        particles = client.particles(args.job)
    save_draws(particles, args.output)
    print(f"{args.output}: particles of shape {list(particles.shape)}", file=sys.stderr)
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    output = args.output or f"sampler.{'onnx' if args.format == 'onnx' else 'zip'}"
    with _client(args) as client:
        path = client.download(args.sampler, output, format=args.format)
    print(path)
    return 0


def _print_listing(args: argparse.Namespace, fetch: str, items: str, columns: tuple[str, ...]) -> int:
    """A catalog listing (`client.<fetch>()[items]`) as tab-separated `columns`, or the whole answer with --json."""
    with _client(args) as client:
        listing = getattr(client, fetch)()
    if args.json:
        _print_json(listing)
        return 0
    for item in listing[items]:
        print("\t".join(str(item.get(column, "-" if column == "family" else "")) for column in columns))
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    return _print_listing(args, "methods", "methods", ("name", "family", "summary"))


def cmd_targets(args: argparse.Namespace) -> int:
    return _print_listing(args, "targets", "kinds", ("kind", "summary"))


def add_client_commands(sub: Any) -> None:
    """Register the client commands on `parvis`'s subparsers (shared by app.cli and the light distribution)."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--url", default=os.environ.get("PARVIS_URL"),
                            help="service URL (default $PARVIS_URL, else http://127.0.0.1:8000)")
    connection.add_argument("--api-key", default=os.environ.get("PARVIS_API_KEY"),
                            help="API key when the service has auth on (default $PARVIS_API_KEY)")
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("-q", "--quiet", action="store_true", help="no progress bar (the final line still)")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="the API's JSON answer instead of a summary")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,
                parents: tuple[argparse.ArgumentParser, ...] = ()) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help, description=help, parents=[connection, *parents])
        parser.set_defaults(func=func)
        return parser

    submit = command("submit", cmd_submit, "submit a JobSpec (.json, .yaml, or - for standard input); prints the "
                     "job id", (quiet,))
    submit.add_argument("spec", metavar="SPEC", help="spec.json | spec.yaml | - (standard input)")
    submit.add_argument("--wait", action="store_true", help="wait for the job with a live progress bar on stderr; "
                        "exit 3 if it fails or is cancelled")
    submit.add_argument("--idempotency-key", default=None,
                        help="make a re-run of this command return the same job (default: a fresh key)")

    status = command("status", cmd_status, "a job's status, progress and metrics", (as_json,))
    status.epilog = KSD_NOTE
    status.add_argument("job", metavar="JOB")
    status.add_argument("--field", default=None, help="print only this field, e.g. sampler_id or progress.step")

    watch = command("watch", cmd_watch, "follow a job until it finishes (live progress bar); exit 3 if it fails",
                    (quiet,))
    watch.epilog = KSD_NOTE
    watch.add_argument("job", metavar="JOB")

    cancel = command("cancel", cmd_cancel, "cancel a job (idempotent)")
    cancel.add_argument("job", metavar="JOB")

    jobs = command("jobs", cmd_jobs, "list your jobs, newest first", (as_json,))
    jobs.add_argument("--status", default=None, choices=["queued", "running", "succeeded", "failed", "cancelled"])
    jobs.add_argument("--limit", type=int, default=20)

    sample = command("sample", cmd_sample, "draw from a trained sampler into a .npy or .csv file")
    sample.add_argument("sampler", metavar="SAMPLER", help="a sampler id (smp_...) or the job that trained it")
    sample.add_argument("-n", type=int, required=True, help="number of draws")
    sample.add_argument("--seed", type=int, default=0, help="same n and seed, same draws (default 0)")
    sample.add_argument("-x", default=None, metavar="INPUTS", help="inputs of a function-space sampler (.npy or .csv)")
    sample.add_argument("-o", "--output", required=True, help="draws.npy or draws.csv")

    particles = command("particles", cmd_particles, "save a finished job's particles to a .npy or .csv file")
    particles.add_argument("job", metavar="JOB")
    particles.add_argument("-o", "--output", required=True, help="particles.npy or particles.csv")

    download = command("download", cmd_download, "download a sampler: .zip (config.json + safetensors) or .onnx")
    download.add_argument("sampler", metavar="SAMPLER", help="a sampler id (smp_...) or the job that trained it")
    download.add_argument("--format", default="safetensors", choices=["safetensors", "onnx"])
    download.add_argument("-o", "--output", default=None, help="file name (default sampler.zip / sampler.onnx)")

    command("methods", cmd_methods, "list the inference methods: name, family, summary", (as_json,))
    command("targets", cmd_targets, "list the target kinds: kind, summary", (as_json,))


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command; a ParvisError is one line on stderr with its code, exit 1."""
    import logging

    from parvis.errors import ParvisError

    logging.getLogger("httpx").setLevel(logging.WARNING)  # its per-request INFO lines would bury the output
    try:
        return args.func(args)
    except ParvisError as exc:
        print(f"parvis: error: {exc.detail} [{exc.code}]", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("parvis: interrupted (the job, if any, keeps running; `parvis cancel JOB` stops it)", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parvis", description="Parvis client: submit and follow jobs, draw "
                                     "from samplers (the server commands come with the full `parvis` package)")
    add_client_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def main(argv: list[str] | None = None) -> None:
    sys.exit(run_command(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()

