"""Start the rrg-review workstation: `rrg-review serve [--db] [--host] [--port] [--no-demo]`
(`python launch.py ...` and `make run` call the same `main`).

Beyond 127.0.0.1 the app requires logins and TLS (`--ssl-certfile/--ssl-keyfile`); plain HTTP
on the network is refused unless `--insecure-http` says a TLS proxy sits in front.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from rrg_review.app.logs import LEVELS

if TYPE_CHECKING:  # imported where used: the app's modules load only when it serves
    from collections.abc import Collection

    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.reader_study.reading import ReadingDesk
    from rrg_review.app.server import ServerOptions
    from rrg_review.app.settings import Settings
    from rrg_review.db.engine import Database


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rrg-review serve",
                                     description="Start the rrg-review workstation.")
    parser.add_argument("--db", help="SQLite file or SQLAlchemy URL (default ./rrg-review.sqlite)")
    parser.add_argument("--data-dir", help="where embedded images are stored")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--model", default=None,
                        help="drafting preset (default: rrg24-baseline when cached, else the "
                             "offline retrieval preset); see `rrg-review models`")
    parser.add_argument("--device", default="auto", help="auto, cuda, cuda:N, mps or cpu")
    parser.add_argument("--presets", help="extra model presets (JSON)")
    parser.add_argument("--no-predraft", action="store_true",
                        help="do not draft upcoming studies in the background")
    parser.add_argument("--no-demo", action="store_true", help="do not add the demo studies")
    parser.add_argument("--include-report-only", action="store_true",
                        help="also put studies without images (imported as references for "
                             "scoring) on reading worklists")
    parser.add_argument("--login", action="store_true",
                        help="require reader login (always on beyond 127.0.0.1; add readers "
                             "with `rrg-review readers add NAME`)")
    parser.add_argument("--ssl-certfile", metavar="PEM", help="TLS certificate (chain) file")
    parser.add_argument("--ssl-keyfile", metavar="PEM", help="TLS private key file")
    parser.add_argument("--insecure-http", action="store_true",
                        help="allow plain HTTP beyond 127.0.0.1 (only behind a TLS proxy)")
    parser.add_argument("--trusted-proxy", action="append", default=[], metavar="CIDR",
                        type=network,
                        help="a reverse proxy's address or network (repeatable): only from it "
                             "are X-Forwarded-For and X-Forwarded-Proto believed, and the "
                             "client is the rightmost address not in these networks")
    parser.add_argument("--read-only", action="store_true",
                        help="browse a database without writing it (no saves, no drafts)")
    parser.add_argument("--session-idle-minutes", type=float, default=30.0,
                        help="sign a reader out after this long without a request (30)")
    parser.add_argument("--session-max-hours", type=float, default=12.0,
                        help="sign a reader out this long after the login, active or not (12)")
    parser.add_argument("--login-backoff-seconds", type=float, default=1.0,
                        help="after 3 failed logins of an account (10 of an address), wait this "
                             "long before the next is checked, doubling with each further "
                             "failure up to 15 minutes (1)")
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, default=None,
                        help="our packages' log level (default $RRG_REVIEW_LOG_LEVEL or INFO); "
                             "the log also goes to <db name>.log beside the database")
    return parser.parse_args(argv)


def network(value: str) -> str:
    """A --trusted-proxy value as a network ("10.0.0.5" -> "10.0.0.5/32"), or argparse's
    one-line error."""
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _refuse(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM stops like Ctrl+C (uvicorn shuts down gracefully, then re-raises the signal):
    # as KeyboardInterrupt, so every clean-up below (workers, exports, private folders) runs
    signal.signal(signal.SIGTERM, _interrupt)
    os.umask(0o077)  # everything this process creates (database, exports, caches) is private
    login = args.login or not is_loopback(args.host)
    tls = bool(args.ssl_certfile or args.ssl_keyfile)
    if tls and not (args.ssl_certfile and args.ssl_keyfile):
        return _refuse("TLS needs both --ssl-certfile and --ssl-keyfile")
    if not is_loopback(args.host) and not tls and not args.insecure_http:
        return _refuse(f"refusing to serve {args.host} over plain HTTP: passwords and reports "
                       "would cross the network unencrypted; give --ssl-certfile and "
                       "--ssl-keyfile (or --insecure-http when a TLS proxy sits in front)")
    from rrg_review.app.server import TLSFilesError, check_tls_files

    if tls:
        try:
            check_tls_files(args.ssl_certfile, args.ssl_keyfile)
        except TLSFilesError as exc:
            return _refuse(str(exc))

    from rrg_review.app.accounts.service import LOCAL_READER
    from rrg_review.app.logs import configure_logging
    from rrg_review.app.settings import Settings, SettingsError
    from rrg_review.app.setup import prepare
    from rrg_review.db.engine import DatabaseProblem
    from rrg_review.studies.pixels import decode_jpeg2000_on_all_cores

    try:
        settings = Settings.from_args(args.db, args.data_dir, log_level=args.log_level,
                                      default_log_level="INFO", presets=args.presets)
    except SettingsError as exc:
        return _refuse(str(exc))
    # logins, throttling, audit, drafting and metric failures: on stderr and in the log file
    log_file = configure_logging(settings.log_level, settings.log_file())
    logging.getLogger(__name__).info("rrg-review starting on %s (log: %s)", args.host, log_file)
    try:
        db = prepare(settings, demo=not args.no_demo, read_only=args.read_only)
    except DatabaseProblem as exc:
        return _refuse(str(exc))
    accounts = _accounts(db, settings, args.login_backoff_seconds)
    if login and not accounts.has_logins():
        where = "beyond this machine" if not is_loopback(args.host) else "with --login"
        return _refuse(f"refusing to serve {where} ({args.host}) without reader accounts: add "
                       "one with `rrg-review readers add NAME`, or bind the default 127.0.0.1")
    if args.read_only and not login and accounts.account(LOCAL_READER) is None:
        return _refuse(f"{db.name} has no local reader yet and is open read-only: open it once "
                       "without --read-only, or use --login with reader accounts")
    runtime = Path(tempfile.mkdtemp(prefix="rrg-review-run-"))  # 0700, removed at exit
    os.environ["GRADIO_TEMP_DIR"] = str(runtime / "gradio")  # before Gradio is imported
    decode_jpeg2000_on_all_cores()
    try:
        return _serve(args, settings, db, accounts, runtime, login, tls)
    except KeyboardInterrupt:
        return 0
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _accounts(db: Database, settings: Settings, backoff_s: float) -> AccountService:
    """The server's accounts: throttle counters in the database (in memory when it is open
    read-only), new passwords hashed at the settings' cost (a warning when below OWASP's)."""
    from rrg_review.app.accounts.service import SCRYPT, AccountService, LoginThrottle
    from rrg_review.app.settings import ENV_PASSWORD_COST

    if settings.password_cost < SCRYPT["n"]:
        logging.getLogger(__name__).warning(
            "new passwords are hashed at scrypt N=2^%d (%s), below OWASP's minimum 2^17: "
            "for test set-ups, not a team's server", settings.password_cost.bit_length() - 1,
            ENV_PASSWORD_COST)
    return AccountService(db, throttle=LoginThrottle(db, base_delay_s=max(0.1, backoff_s)),
                          password_cost=settings.password_cost)


def _readings(db: Database, settings: Settings, presets: Collection[str],
              accounts: AccountService) -> ReadingDesk:
    """Reader-study readings on the page, judged by the study clock the settings chose."""
    from rrg_review.app.reader_study.reading import ReadingDesk
    from rrg_review.app.reader_study.service import ReaderStudyService

    studies = ReaderStudyService(db, presets, clock=settings.study_clock())
    return ReadingDesk(studies, accounts.audit)


def _server_options(args: argparse.Namespace, runtime: Path, login: bool,
                    pixel_dir: Path | None, asset_dir: Path) -> ServerOptions:
    """The web server's options from the command line (Gradio's private cache in `runtime`;
    the viewer's pixel files in `pixel_dir`; the compressed front-end files in `asset_dir`)."""
    from rrg_review.app.server import ServerOptions

    return ServerOptions(host=args.host, port=args.port, login=login,
                         ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile,
                         gradio_cache=runtime / "gradio", pixel_dir=pixel_dir,
                         asset_dir=asset_dir, trusted_proxies=tuple(args.trusted_proxy))


def _serve(args: argparse.Namespace, settings: Settings, db: Database, accounts: AccountService,
           runtime: Path, login: bool, tls: bool) -> int:
    from rrg_review.app.accounts.service import SessionStore
    from rrg_review.app.deps import Services
    from rrg_review.app.drafting.service import (
        DraftingService,
        PreDrafter,
        RuntimeConfig,
        default_preset,
    )
    from rrg_review.app.evaluation.export import ExportService, ExportSpool
    from rrg_review.app.evaluation.study_metrics import StudyMetrics
    from rrg_review.app.page import build, launch_options
    from rrg_review.app.review.service import ReviewService
    from rrg_review.app.server import build_app, serve
    from rrg_review.app.viewer.service import StudyViewer
    from rrg_review.app.warmup import warm_up
    from rrg_review.app.worklist.service import WorklistService
    from rrg_review.model.presets import UnknownPreset
    exports = ExportService(db, accounts.audit, ExportSpool(runtime / "exports"))
    viewer = StudyViewer(db, settings.blobs, preview_dir=settings.data_dir / "previews")
    # asked once: without network nothing the page does waits on the hub (Settings.downloads)
    drafting = DraftingService(db, settings, RuntimeConfig(device=args.device,
                                                           download=settings.downloads()),
                               decoded=viewer.decoded)
    preset = args.model or default_preset(drafting.presets)
    try:
        drafting.preset(preset)
    except UnknownPreset as exc:
        return _refuse(str(exc))
    predrafter = (None if args.no_predraft or args.read_only
                  else PreDrafter(drafting, preset))
    # the panel never downloads: metrics whose weights are not here say so at once
    panel = StudyMetrics(db, config=settings.metric_config(download=False))
    worklists = WorklistService(db, include_report_only=args.include_report_only)
    ui = build(Services(viewer, ReviewService(db, accounts.audit), worklists,
                        accounts, exports, drafting, predrafter, preset, panel, login,
                        _readings(db, settings, drafting.presets, accounts)))
    # the first page's first-use work, before the port opens (issue #21: 7-14 s first loads)
    warm_up(viewer, panel.metrics, None if login else worklists.resume(accounts.local_reader()))
    sessions = SessionStore(db, idle_s=args.session_idle_minutes * 60,
                            absolute_s=args.session_max_hours * 3600)
    options = _server_options(args, runtime, login, viewer.preview_dir,
                              settings.cache_dir / "front-end")
    app = build_app(ui, accounts, sessions, options, launch_kwargs={
        "allowed_paths": [str(viewer.preview_dir)], "show_error": True,
        **launch_options(options.nonce_placeholder)},
        on_export_download=lambda: exports.spool.purge(older_than_s=0))
    mode = " (read-only)" if args.read_only else ""
    print(f"rrg-review: database {settings.db_url}{mode}; drafting with preset {preset}",
          flush=True)
    try:
        serve(app, options)
    finally:
        if predrafter is not None:
            predrafter.stop()
        drafting.unload()
        exports.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
