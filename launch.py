"""Start the rrg-review workstation: `python launch.py [--db] [--host] [--port] [--no-demo]`."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start the rrg-review workstation.")
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
    return parser.parse_args(argv)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    login = args.login or not is_loopback(args.host)

    from app.services.drafting import DraftingService, PreDrafter, RuntimeConfig, default_preset
    from app.services.evaluation import StudyMetrics
    from app.services.review import ReviewService
    from app.services.setup import prepare
    from app.services.viewer import StudyViewer
    from app.settings import Settings
    from app.ui.workstation import build, launch_options
    from metrics.registry import MetricConfig
    from model.presets import UnknownPreset

    settings = Settings.from_args(args.db, args.data_dir)
    db = prepare(settings, demo=not args.no_demo)
    review = ReviewService(db, include_report_only=args.include_report_only)
    if login and not review.has_logins():
        where = "beyond this machine" if not is_loopback(args.host) else "with --login"
        print(f"error: refusing to serve {where} ({args.host}) without reader accounts: add one "
              "with `rrg-review readers add NAME`, or bind the default 127.0.0.1",
              file=sys.stderr)
        return 2
    viewer = StudyViewer(db, settings.blobs, preview_dir=settings.data_dir / "previews")
    drafting = DraftingService(db, settings, RuntimeConfig(device=args.device,
                                                           presets_file=args.presets),
                               decoded=viewer.decoded)
    preset = args.model or default_preset(drafting.presets)
    try:
        drafting.preset(preset)
    except UnknownPreset as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    predrafter = None if args.no_predraft else PreDrafter(drafting, preset)
    # the panel never downloads: metrics whose weights are not here say so at once
    panel = StudyMetrics(db, config=MetricConfig(download=False))
    ui = build(viewer, drafting, predrafter, preset, review, panel, login=login)
    print(f"rrg-review: database {settings.db_url}; drafting with preset {preset}")
    signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl+C: Gradio closes, workers stop
    try:
        ui.launch(server_name=args.host, server_port=args.port, show_error=True,
                  auth=(lambda name, pw: review.authenticate(name, pw) is not None)
                  if login else None, allowed_paths=[str(viewer.preview_dir)],
                  **launch_options())
    finally:
        if predrafter is not None:
            predrafter.stop()
        drafting.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
