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
    if not is_loopback(args.host):
        print(f"error: refusing to bind {args.host}: serving beyond this machine requires reader "
              "logins, which are not set up yet; use the default 127.0.0.1", file=sys.stderr)
        return 2

    from app.services.drafting import DraftingService, PreDrafter, RuntimeConfig, default_preset
    from app.services.setup import prepare
    from app.services.viewer import StudyViewer
    from app.settings import Settings
    from app.ui.workstation import build
    from model.presets import UnknownPreset

    settings = Settings.from_args(args.db, args.data_dir)
    db = prepare(settings, demo=not args.no_demo)
    viewer = StudyViewer(db, settings.blobs)
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
    ui = build(viewer, drafting, predrafter, preset)
    print(f"rrg-review: database {settings.db_url}; drafting with preset {preset}")
    signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl+C: Gradio closes, workers stop
    try:
        ui.launch(server_name=args.host, server_port=args.port, show_error=True)
    finally:
        if predrafter is not None:
            predrafter.stop()
        drafting.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
