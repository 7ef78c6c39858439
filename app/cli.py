"""`parvis` command line: serve (embedded API + worker), api, worker, db upgrade, keys create/list/revoke, and
the client commands of `parvis.cli` (submit, status, watch, cancel, jobs, sample, particles, download, methods,
targets) that talk to a running service over HTTP."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ipaddress
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from service.logging_config import configure_logging, logging_dict_config

LOOPBACK_NAMES = {"localhost"}
# Idle keep-alive connections are closed after this many seconds. With uvicorn's 5 s default, a client or load
# balancer that reuses a connection after about 5 idle seconds can send into a closing socket and see a
# transport error; keep it above common balancer idle timeouts (60 s).
KEEP_ALIVE_SECONDS = 75
logger = logging.getLogger("parvis")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _settings(data_dir: str | None = None):  # noqa: ANN202
    if data_dir is not None:
        os.environ["PARVIS_DATA_DIR"] = str(Path(data_dir).expanduser().resolve())
    from service.settings import get_settings

    get_settings.cache_clear()
    return get_settings()


def _terminate_with_parent() -> None:
    """In the worker child: get SIGTERM if `parvis serve` dies, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class WorkerProcess:
    """One `python -m workers` child in its own session, restarted if it dies while the API is up."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="worker-watch", daemon=True)

    def start(self) -> None:
        self._spawn()
        self.watcher.start()

    def _spawn(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "workers"], start_new_session=True,
                                        preexec_fn=_terminate_with_parent)

    def _watch(self) -> None:
        while not self.stopping.wait(1.0):
            if self.process is not None and self.process.poll() is not None and not self.stopping.is_set():
                logger.error("worker exited with code %s; restarting it", self.process.returncode)
                time.sleep(1.0)
                if not self.stopping.is_set():
                    self._spawn()

    def stop(self, grace_seconds: float) -> None:
        """Warm shutdown (the running job checkpoints and is requeued), then kill what is left."""
        self.stopping.set()
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            logger.warning("worker did not stop within %.0f s; killing it", grace_seconds)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the pool children too
        process.wait()


def _uvicorn_server_class():  # noqa: ANN202 - uvicorn is imported lazily
    import uvicorn

    class OwnSignalsServer(uvicorn.Server):
        """uvicorn re-raises SIGINT/SIGTERM after shutting down, which would kill `serve` before it stops the
        worker; here the signals only ask the server to exit and `serve` finishes its own shutdown."""

        @contextlib.contextmanager
        def capture_signals(self):  # noqa: ANN202
            yield

    return OwnSignalsServer


def cmd_serve(args: argparse.Namespace) -> int:
    if args.auth is not None:
        os.environ["PARVIS_AUTH_ENABLED"] = "1" if args.auth else "0"
    settings = _settings(args.data_dir)
    if not is_loopback(args.host) and not settings.auth_enabled:
        print(f"refusing to serve on {args.host} without authentication: pass --auth (and create keys with "
              "`parvis keys create --tenant NAME`) or bind to 127.0.0.1", file=sys.stderr)
        return 2
    import uvicorn

    from app.main import create_app
    from service.migrate import upgrade

    server_class = _uvicorn_server_class()
    upgrade(settings.database_url)
    worker = WorkerProcess()
    worker.start()
    url = f"http://{args.host if ':' not in args.host else f'[{args.host}]'}:{args.port}"
    auth = "ON (Authorization: Bearer <key>)" if settings.auth_enabled else "OFF (single user, tenant 'local')"
    print(f"Parvis serving at {url}  (API docs: {url}/v1/docs)", flush=True)
    print(f"  authentication: {auth}", flush=True)
    print(f"  data directory: {settings.data_dir}", flush=True)
    server = server_class(uvicorn.Config(create_app(settings), host=args.host, port=args.port,
                                         log_level="info", access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS,
                                         log_config=logging_dict_config(settings.log_format)))
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, server.handle_exit)
    try:
        server.run()
    finally:
        print("stopping worker...", flush=True)
        worker.stop(settings.worker_shutdown_grace_seconds)
        print("Parvis stopped.", flush=True)
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    settings = _settings(args.data_dir)
    if not is_loopback(args.host) and not settings.auth_enabled:
        print(f"refusing to serve on {args.host} without authentication (set PARVIS_AUTH_ENABLED=1)", file=sys.stderr)
        return 2
    import uvicorn

    if args.workers > 1:
        # Several processes on one socket, each building its app from the environment (PARVIS_DATA_DIR was
        # set by _settings). They share nothing in memory: the database, broker and store hold all state.
        uvicorn.run("app.main:create_app", factory=True, workers=args.workers, host=args.host, port=args.port,
                    log_level="info", access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS,
                    log_config=logging_dict_config(settings.log_format))
        return 0
    from app.main import create_app

    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info", access_log=False,
                timeout_keep_alive=KEEP_ALIVE_SECONDS, log_config=logging_dict_config(settings.log_format))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    _settings(args.data_dir)
    os.execv(sys.executable, [sys.executable, "-m", "workers", *args.celery_args])
    return 0  # pragma: no cover - execv does not return


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from service.migrate import upgrade

    settings = _settings(args.data_dir)
    upgrade(settings.database_url, args.revision)
    print(f"database at revision {args.revision}")
    return 0


def _schema_ready(settings) -> bool:  # noqa: ANN001 - service.settings.Settings, imported lazily
    """Make sure the database has the schema before a `keys` command: the embedded default SQLite database is
    migrated here (as `parvis serve` does); an external one without the schema gets a one-line hint."""
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url

    from service.db import make_engine
    from service.migrate import upgrade

    if not os.environ.get("PARVIS_DATABASE_URL"):
        upgrade(settings.database_url)
        return True
    from sqlalchemy.exc import OperationalError

    where = make_url(settings.database_url).render_as_string(hide_password=True)
    engine = make_engine(settings.database_url)
    try:
        present = inspect(engine).has_table("api_keys")
    except OperationalError as exc:
        print(f"parvis: error: cannot open the database {where}: {str(exc.orig).strip().splitlines()[-1]}",
              file=sys.stderr)
        return False
    finally:
        engine.dispose()
    if not present:
        print(f"parvis: error: the database {where} has no Parvis tables yet; run `parvis db upgrade` first",
              file=sys.stderr)
    return present


def cmd_keys_create(args: argparse.Namespace) -> int:
    from service.api_keys import create_api_key
    from service.db import make_engine, make_session_factory

    settings = _settings(args.data_dir)
    if not _schema_ready(settings):
        return 1
    engine = make_engine(settings.database_url)
    with make_session_factory(engine)() as session:
        key = create_api_key(session, args.tenant, args.name)
    engine.dispose()
    print(key)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from service.api_keys import list_api_keys
    from service.db import make_engine, make_session_factory

    settings = _settings(args.data_dir)
    if not _schema_ready(settings):
        return 1
    engine = make_engine(settings.database_url)
    with make_session_factory(engine)() as session:
        keys = list_api_keys(session, args.tenant)
    engine.dispose()
    print("\t".join(("id", "tenant", "name", "prefix", "created", "revoked")))
    for key in keys:  # only the lookup prefix: the secret is never stored, so never shown
        print("\t".join((key.id, key.tenant_id, key.name or "-", f"pvs_{key.prefix}_...",
                         key.created_at.isoformat(timespec="seconds"),
                         key.revoked_at.isoformat(timespec="seconds") if key.revoked_at else "-")))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from service.api_keys import revoke_api_key
    from service.db import make_engine, make_session_factory

    settings = _settings(args.data_dir)
    if not _schema_ready(settings):
        return 1
    engine = make_engine(settings.database_url)
    with make_session_factory(engine)() as session:
        key, newly = revoke_api_key(session, args.key)
        if key is not None:
            verb = "revoked" if newly else "already revoked"
            print(f"{verb} {key.id} (tenant {key.tenant_id}, prefix pvs_{key.prefix}_...) at "
                  f"{key.revoked_at.isoformat(timespec='seconds')}")
    engine.dispose()
    if key is None:
        print(f"no API key with id or prefix {args.key!r}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    from parvis.cli import add_client_commands

    parser = argparse.ArgumentParser(prog="parvis", description="Parvis: posterior sampling as a service")
    sub = parser.add_subparsers(dest="command", required=True)
    add_client_commands(sub)

    def data_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", default=None, help="embedded data directory (default ./parvis-data)")

    def command(name: str, summary: str, description: str = "") -> argparse.ArgumentParser:
        """A subcommand whose one-line summary shows in `parvis --help` and heads its own --help."""
        return sub.add_parser(name, help=summary, description=f"{summary}. {description}".strip())

    def host_port(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other "
                       "address needs authentication)")
        p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")

    serve = command("serve", "run the API and one worker with the embedded defaults (SQLite, filesystem task "
                    "queue, artifacts under the data directory)", "Creates or migrates the database first.")
    host_port(serve)
    data_dir(serve)
    serve.add_argument("--auth", dest="auth", action="store_true", default=None,
                       help="require an API key on every request (create one with `parvis keys create`); "
                       "default: $PARVIS_AUTH_ENABLED, off")
    serve.add_argument("--no-auth", dest="auth", action="store_false",
                       help="no API keys: single user, tenant 'local' (only on a loopback --host)")
    serve.set_defaults(func=cmd_serve)

    api = command("api", "run the HTTP API alone, without a worker (cluster deployments)",
                  "Needs a migrated database (`parvis db upgrade`) and workers started with `parvis worker`.")
    host_port(api)
    api.add_argument("--workers", type=int, default=1, help="API processes serving the port (uvicorn workers)")
    data_dir(api)
    api.set_defaults(func=cmd_api)

    worker = command("worker", "run one Celery worker that trains the queued jobs (cluster deployments)",
                     "Extra arguments go to `celery worker`, e.g. --concurrency 2.")
    data_dir(worker)
    worker.add_argument("celery_args", nargs=argparse.REMAINDER, help="extra arguments for celery worker")
    worker.set_defaults(func=cmd_worker)

    db = command("db", "database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_upgrade = db_sub.add_parser("upgrade", help="run migrations")
    db_upgrade.add_argument("revision", nargs="?", default="head")
    data_dir(db_upgrade)
    db_upgrade.set_defaults(func=cmd_db_upgrade)

    keys = command("keys", "create, list and revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key for a tenant (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", default=None)
    data_dir(create)
    create.set_defaults(func=cmd_keys_create)
    listing = keys_sub.add_parser("list", help="list keys: id, tenant, name, prefix, created, revoked (no secrets)")
    listing.add_argument("--tenant", default=None, help="only this tenant's keys")
    data_dir(listing)
    listing.set_defaults(func=cmd_keys_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key at once (its next request gets 401)")
    revoke.add_argument("key", metavar="KEY_ID_OR_PREFIX", help="the key's id (key_...) or prefix (or the key)")
    data_dir(revoke)
    revoke.set_defaults(func=cmd_keys_revoke)
    return parser


def main(argv: list[str] | None = None) -> None:
    from parvis.cli import run_command

    configure_logging()  # PARVIS_LOG_FORMAT: text (default) or json; uvicorn gets the same set-up below
    args = build_parser().parse_args(argv)
    sys.exit(run_command(args))


if __name__ == "__main__":
    main()
