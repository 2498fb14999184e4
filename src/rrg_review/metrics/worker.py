"""Metric worker: runs one metric in its own Python environment and talks JSON lines.

For metrics whose packages conflict with the app's stack (RaTEScore needs medspacy, which pins
numpy < 2 on Python 3.11; GREEN needs a 7B model and a GPU). The same protocol as the drafting
worker (model/worker.py). This file is self-contained (standard library only at import; each
adapter imports its package); the app starts it as `<python> worker.py --metric NAME`.

Protocol, one JSON object per line:
  worker -> app  {"ready": true, "metric", "version", "device", "python"}
                 or {"ready": false, "error": "..."} and exit
  app -> worker  {"id": 7, "hyps": [str, ...], "refs": [str, ...]}
  worker -> app  {"id": 7, "values": [float, ...], "seconds": 1.2} or {"id": 7, "error": "..."}
  app -> worker  {"op": "shutdown"}
Anything else the metric libraries print goes to stderr, never to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from functools import partial
from typing import Any

log = logging.getLogger(__name__)


def _revision(model_id: str) -> str:
    """`id@commit` of a hub model in the local cache (the snapshot folder is named by its
    commit), or `path@sha256` of a local folder's config and weight files."""
    import hashlib

    if os.path.isdir(model_id):
        digest = hashlib.sha256()
        for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
            path = os.path.join(model_id, name)
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    for block in iter(partial(fh.read, 1 << 20), b""):
                        digest.update(block)
        return f"{os.path.abspath(model_id)}@{digest.hexdigest()[:16]}"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return f"{model_id}@unknown"
    found = try_to_load_from_cache(model_id, "config.json")
    return f"{model_id}@{os.path.basename(os.path.dirname(found))}" if isinstance(found, str) \
        else f"{model_id}@unknown"


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class SelfTestAdapter:
    """A stand-in metric with no dependencies (token-set Jaccard), so `setup-worker` and the
    tests can prove the protocol and the environment work without any weights."""

    version = "selftest-jaccard-1"
    fingerprint = "no weights"

    def __init__(self, device: str, batch_size: int, **options: Any) -> None:
        self.device = "cpu"

    def score(self, hyps: list[str], refs: list[str]) -> list[float]:
        """Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair the Jaccard overlap of lowercased word sets; 1.0 when both are empty.
        """
        out = []
        for hyp, ref in zip(hyps, refs, strict=True):
            a, b = set(hyp.lower().split()), set(ref.lower().split())
            out.append(len(a & b) / len(a | b) if a | b else 1.0)
        return out


class RaTEScoreAdapter:
    """`RaTEScore(use_gpu=<CUDA available>).compute_score(hyps, refs)`: the package's own
    defaults (RaTE-NER-Deberta, BioLORD-2023-C, its default affinity matrix); `bert_model` and
    `eval_model` may name other models (tests use tiny local ones)."""

    def __init__(self, device: str, batch_size: int, bert_model: str | None = None,
                 eval_model: str | None = None) -> None:
        import inspect
        from importlib.metadata import version

        from RaTEScore import RaTEScore

        defaults = inspect.signature(RaTEScore).parameters
        bert_model = bert_model or defaults["bert_model"].default
        eval_model = eval_model or defaults["eval_model"].default
        gpu = device.startswith("cuda") if device != "auto" else _cuda()
        self.device = "cuda" if gpu else "cpu"
        self.version = f"ratescore-{version('ratescore')}"
        self.scorer = RaTEScore(bert_model=bert_model, eval_model=eval_model, use_gpu=gpu,
                                batch_size=batch_size)
        self.fingerprint = [_revision(bert_model), _revision(eval_model)]

    def score(self, hyps: list[str], refs: list[str]) -> list[float]:
        """compute_score drops a report in which its splitter finds no sentence (empty, or
        only pieces under 3 characters) and then zips the shorter lists, shifting every later
        score onto the wrong pair. Such pairs get the package's own value for a report without
        entities (0.5); the others are scored together, in order.

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            One RaTEScore per pair, in order.

        Raises:
            RuntimeError: the package returned another number of scores than pairs sent.
        """
        from RaTEScore.utils import sentence_split

        def has_sentence(text: str) -> bool:
            return bool(sentence_split([text])[0])

        keep = [i for i, (h, r) in enumerate(zip(hyps, refs, strict=True))
                if has_sentence(h) and has_sentence(r)]
        out = [0.5] * len(hyps)
        if keep:
            values = self.scorer.compute_score([hyps[i] for i in keep], [refs[i] for i in keep])
            if len(values) != len(keep):
                raise RuntimeError(f"RaTEScore returned {len(values)} scores for {len(keep)} "
                                   "pairs")
            for i, value in zip(keep, values, strict=True):
                out[i] = float(value)
        return out

    @staticmethod
    def selfcheck() -> dict[str, Any]:
        """The package's own code that needs no weights: medspacy sentence splitting and the
        type-weighted similarity (with its negation weight) on hand-made embeddings, with the
        package's default ("long") affinity matrix keyed as RaTEScore.__init__ keys it.

        Returns:
            The split sentences and their starts, and the similarity value, as JSON-able data
            (`setup-worker` prints them; an exception means the check failed).
        """
        import torch
        from RaTEScore.scorer import DEFAULT_MATRIX_LONG
        from RaTEScore.utils import compute, sentence_split

        sentences, starts = sentence_split(["No pneumothorax. Small left effusion.", "ok"])
        matrix = {(k.split("_")[0].upper(), k.split("_")[1].upper()): v
                  for k, v in DEFAULT_MATRIX_LONG.items()}
        gt = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        pred = torch.tensor([[1.0, 0.0]])
        value = compute(gt, pred, ["ABNORMALITY", "ANATOMY"], ["NON-ABNORMALITY"], matrix)
        return {"sentences": sentences, "starts": starts, "compute": float(value)}


class GreenAdapter:
    """GREEN with StanfordAIMI/GREEN-RadLlama2-7b, batched, on a CUDA GPU only."""

    model = "StanfordAIMI/GREEN-RadLlama2-7b"

    def __init__(self, device: str, batch_size: int, **options: Any) -> None:
        if not _cuda() or device == "cpu":
            raise RuntimeError(
                "GREEN runs a 7B language model (GREEN-RadLlama2-7b: about 14 GB of weights in "
                "bfloat16, minutes per report on a CPU); it needs a CUDA GPU and is not "
                "substituted by anything else here")
        from importlib.metadata import version

        from green_score import GREEN

        self.device = "cuda"
        self.version = f"green_score-{version('green-score')}-{self.model}"
        self.scorer = GREEN(self.model, output_dir=os.environ.get("TMPDIR", "/tmp"))  # noqa: S108 - GREEN's scratch, as the OS
        self.batch_size = batch_size
        self.fingerprint = self.model

    def score(self, hyps: list[str], refs: list[str]) -> list[float]:
        """Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            GREEN's per-report score for each pair, in order.
        """
        # GREEN's call takes (refs, hyps) and returns (mean, std, per-report scores, ...)
        result = self.scorer(list(refs), list(hyps))
        return [float(v) for v in result[2]]


ADAPTERS = {"selftest": SelfTestAdapter, "ratescore": RaTEScoreAdapter, "green": GreenAdapter}


def main(argv: list[str] | None = None) -> int:
    """The worker process: load the metric, say ready (or why not), then answer requests
    on stdin until shutdown or end of input (see the module docstring).

    Args:
        argv: the command-line arguments; None: sys.argv.

    Returns:
        The exit status: 0 after shutdown or a passed self-check, 1 when the metric could not
        be loaded or the self-check failed. A failed request is answered with its error and
        the worker goes on.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric", required=True, choices=sorted(ADAPTERS))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--options", default="{}",
                        help="JSON object of adapter options (e.g. ratescore's bert_model)")
    parser.add_argument("--selfcheck", action="store_true",
                        help="run the metric package's weight-free code once, print JSON, exit")
    args = parser.parse_args(argv)
    if args.selfcheck:
        check = getattr(ADAPTERS[args.metric], "selfcheck", None)
        try:
            print(json.dumps({"ok": True, **(check() if check else {})}))
        except Exception as exc:
            log.exception("self-check of %s failed", args.metric)
            print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
            return 1
        return 0
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints never corrupt the protocol stream

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        options = json.loads(args.options)
        if not isinstance(options, dict):
            raise ValueError("--options must be a JSON object")
        adapter = ADAPTERS[args.metric](args.device, args.batch_size, **options)
    except Exception as exc:  # missing package, no GPU, no weights: say why and stop
        log.exception("loading %s failed", args.metric)
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True, "metric": args.metric, "version": adapter.version,
          "device": adapter.device, "fingerprint": adapter.fingerprint,
          "python": sys.executable, "prefix": sys.prefix})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            send({"id": None, "error": f"not JSON: {exc.msg}"})
            continue
        if not isinstance(request, dict):  # valid JSON such as [1] or "x": answered, not fatal
            send({"id": None, "error": f"not a JSON object: {type(request).__name__}"})
            continue
        if request.get("op") == "shutdown":
            break
        start = time.perf_counter()
        try:
            hyps, refs = request["hyps"], request["refs"]
            if not all(isinstance(x, list) and all(isinstance(t, str) for t in x)
                       for x in (hyps, refs)):
                raise ValueError("hyps and refs must be lists of strings")
            if len(hyps) != len(refs):
                raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
            values = adapter.score(hyps, refs)
        except Exception as exc:
            log.warning("request %s failed", request.get("id"), exc_info=True)
            send({"id": request.get("id"), "error": f"{type(exc).__name__}: {exc}"})
            continue
        send({"id": request.get("id"), "values": values,
              "seconds": round(time.perf_counter() - start, 4)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
