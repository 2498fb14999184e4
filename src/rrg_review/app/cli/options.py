"""Options and helpers several commands share: the database, the runtime of a model, the
CheXbert weights, a progress bar and the metric score cache."""

from __future__ import annotations

import argparse
from typing import Any

from rrg_review.core.progress import Progress
from rrg_review.core.user_cache import user_cache_dir


def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="PATH_OR_URL",
        help="SQLite file or SQLAlchemy URL (default: $RRG_REVIEW_DB or ./rrg-review.sqlite)",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR",
        help="where embedded images are stored (default: $RRG_REVIEW_DATA or <db>-data/)",
    )


def add_chexbert(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chexbert-weights", metavar="PTH",
                        help="a chexbert.pth for CheXbert F1 and SembScore (default "
                             "$RRG_REVIEW_CHEXBERT, else the hub's StanfordAIMI/RRG_scorers copy)")


def add_ray(parser: argparse.ArgumentParser, workers_help: str | None = None) -> None:
    """--address, --workers and --gpus-per-worker of the Ray engine."""
    parser.add_argument("--address", help="Ray cluster to use, as `ray start` prints it "
                        "(default: RAY_ADDRESS, else the cluster `ray start` runs on this "
                        "machine, else a local one for this command)")
    parser.add_argument("--workers", type=int, default=1, metavar="N", help=workers_help)
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G")


def add_runtime(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (CUDA > MPS > CPU), cuda, cuda:N, "
                        "mps or cpu")
    parser.add_argument("--dtype", default="auto", help="auto (bf16/fp16 on GPU, fp32 on CPU), "
                        "bfloat16, float16 or float32")
    parser.add_argument("--presets", metavar="FILE",
                        help="extra model presets (JSON; default $RRG_REVIEW_PRESETS)")
    parser.add_argument("--worker-python", metavar="PYTHON",
                        help="interpreter of the separate environment for worker presets")
    parser.add_argument("--offline", action="store_true",
                        help="never download weights (as with HF_HUB_OFFLINE=1)")


def runtime(args: argparse.Namespace, settings: Any) -> Any:
    """The drafting RuntimeConfig the --device/--dtype/... options describe; weights are
    downloaded only when neither --offline nor a missing network (`Settings.downloads`)
    forbids it."""
    from rrg_review.app.drafting.service import RuntimeConfig

    return RuntimeConfig(device=args.device, dtype=args.dtype,
                         batch_size=getattr(args, "batch_size", None),
                         download=not args.offline and settings.downloads(),
                         worker_python=args.worker_python,
                         presets_file=args.presets)


def metric_names(text: str | None) -> list[str] | None:
    """--metrics "a, b" as a list (None: the default set)."""
    return [m.strip() for m in text.split(",") if m.strip()] if text else None


def tqdm_progress(desc: str, unit: str) -> Progress:
    """A Progress callback drawing a tqdm bar (closed by calling it with done=-1)."""
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit=unit, dynamic_ncols=True, disable=None)

    def progress(done: int, total: int | None) -> None:
        if done < 0:
            bar.close()
            return
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return progress


def metric_cache(args: argparse.Namespace) -> Any:
    """The database when --db is given, else a local cache file."""
    if args.db:
        from rrg_review.app.settings import Settings
        from rrg_review.db.metric_cache import DatabaseScoreCache

        return DatabaseScoreCache(Settings.from_args(args.db).open_database())
    from rrg_review.metrics.cache import FileCache

    path = args.cache or user_cache_dir() / "scores.sqlite"
    return FileCache(path)
