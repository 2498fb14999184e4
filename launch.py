"""Start the rrg-review workstation: `python launch.py [--db] [--host] [--port] [--no-demo]`."""

from __future__ import annotations

import argparse
import ipaddress
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Start the rrg-review workstation.")
    parser.add_argument("--db", help="SQLite file or SQLAlchemy URL (default ./rrg-review.sqlite)")
    parser.add_argument("--data-dir", help="where embedded images are stored")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--model", default=None,
                        help="drafting preset (default: offline retrieval)")
    parser.add_argument("--no-demo", action="store_true", help="do not add the demo studies")
    return parser.parse_args(argv)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not is_loopback(args.host):
        print(f"error: refusing to bind {args.host}: serving beyond this machine requires reader "
              "logins, which are not set up yet; use the default 127.0.0.1", file=sys.stderr)
        return 2

    from app.services.setup import prepare
    from app.services.viewer import StudyViewer
    from app.settings import Settings
    from app.ui.workstation import build

    settings = Settings.from_args(args.db, args.data_dir)
    db = prepare(settings, demo=not args.no_demo)
    ui = build(StudyViewer(db, settings.blobs))
    print(f"rrg-review: database {settings.db_url}")
    ui.launch(server_name=args.host, server_port=args.port, show_error=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
