"""RadCliQ-v1 and 1/RadCliQ-v1, the ReXrank ranking metric, from its four component metrics.

Per report, CXR-Report-Metric's `CompositeMetric.predict` (`run_eval.py`): the inputs
[radgraph_combined, bertscore (ReXrank configuration), semb_score, bleu2] are standardized with the
fitted StandardScaler (x - mean_) / scale_, a 1 is appended, and the result is multiplied by
`coefs` (four weights then the intercept). Lower is better. `radcliq_v1` is the mean over reports;
`inv_radcliq_v1` (the ReXrank column, higher is better) is the reciprocal of that mean, not a mean
of reciprocals (per-report values can be negative or near zero), so it has no per-report value and
its bootstrap interval recomputes the reciprocal from each resample's mean.

The constants below were decoded with `pickletools` (never unpickled) from
`CXRMetric/radcliq-v1.pkl` of rajpurkarlab/CXR-Report-Metric, last changed in commit
8495627c887a32a951199555b9c79a4e2f12e50b ("Updated composite metric computation to RadCliQ-v1"),
read at 9c9ecad39be6cb2be8e75be1d1c50ef8888a3e40; the pickle's sha256 is REFERENCE_SHA256.
`decode_reference_pickle` re-reads them from that file.
"""

from __future__ import annotations

import pickletools
import struct
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from rrg_review.metrics.base import Metric, Payload
from rrg_review.metrics.store import METRICS

REFERENCE_FILE = "rajpurkarlab/CXR-Report-Metric:CXRMetric/radcliq-v1.pkl"
REFERENCE_COMMIT = "8495627c887a32a951199555b9c79a4e2f12e50b"
REFERENCE_SHA256 = "ddc38dc9bd93993509aa41416dac11daf2bb74f498508109d2c806ac1de931ae"
INPUTS = ("radgraph_combined", "bertscore_rexrank", "semb_score", "bleu2")
# StandardScaler(with_mean=True, with_std=True), n_samples_seen_=160, sklearn 1.1.1
MEAN = (0.5379231241355762, 0.6175725628125001, 0.7647942121140658, 0.44738335396242174)
SCALE = (0.3028258411486429, 0.22430938459304575, 0.2539439110169773, 0.2989271671041838)
# coefs: the four weights, then the intercept
COEFS = (-0.37708368261038905, -0.37030009974480316, -0.25261621789593225,
         4.315048405024756e-12, 2.466552561323256e-10)


def radcliq_v1(x: np.ndarray) -> np.ndarray:
    """Per-report RadCliQ-v1 of an (n, 4) array of INPUTS columns.

    Args:
        x: the component values, one row per report, columns in INPUTS order.

    Returns:
        One score per row (lower is better; standardised, so it may be negative).
    """
    norm = (np.asarray(x, dtype=np.float64) - np.array(MEAN)) / np.array(SCALE)
    norm = np.concatenate((norm, np.ones((len(norm), 1))), axis=1)
    scores: np.ndarray = norm @ np.array(COEFS)
    return scores


def decode_reference_pickle(data: bytes) -> dict[str, tuple[float, ...]]:
    """The float64 arrays of the reference pickle by attribute name (mean_, var_, scale_,
    coefs), read from its opcodes: each array's raw bytes are the first bytes after the
    attribute's name (the dtype strings in between are skipped).

    Read without unpickling, so the reference file's numbers can be checked against the
    constants here without running code from it.

    Args:
        data: the bytes of radcliq-v1.pkl.

    Returns:
        attribute name -> its float64 values; names not found are absent.
    """
    wanted = ("mean_", "var_", "scale_", "coefs")
    found: dict[str, tuple[float, ...]] = {}
    name = None
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE") and arg in wanted:
            name = arg
        elif op.name in ("SHORT_BINBYTES", "BINBYTES") and name and isinstance(arg, bytes) \
                and len(arg) % 8 == 0 and len(arg) > 8:
            found[name] = struct.unpack(f"<{len(arg) // 8}d", arg)
            name = None
    return found


@METRICS.metric
class RadCliQ(Metric):
    """Its matrix is the four component columns; values come from the component metrics (each
    cached on its own), so asking for RadCliQ beside its components costs nothing extra."""

    name = "radcliq_v1"
    keys = ("radcliq_v1", "inv_radcliq_v1")
    directions: ClassVar[dict[str, str]] = {"radcliq_v1": "lower", "inv_radcliq_v1": "higher"}
    # built from these registered metrics (shared instances, so each model loads once)
    part_names = INPUTS
    version = f"radcliq-v1-{REFERENCE_COMMIT[:7]}"
    reference = "CXR-Report-Metric run_eval.py CompositeMetric.predict (radcliq-v1.pkl)"
    chunk = None

    def __init__(self, components: Sequence[Metric]) -> None:
        """`components`: one metric per INPUTS column, in that order (a key may carry a
        `[model]` suffix, as tests' tiny models do)."""
        bases = tuple(m.keys[0].split("[")[0] for m in components)
        if bases != INPUTS:
            raise ValueError(f"RadCliQ-v1 needs {', '.join(INPUTS)} in this order, got "
                             f"{', '.join(bases)}")
        self.components = tuple(components)

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """The four component values per pair, computed directly (scoring normally builds
        the matrix from the components' cached values instead and never calls this).

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {INPUTS name: value}.
        """
        columns = [[p[m.keys[0]] for p in m.compute(hyps, refs)] for m in self.components]
        return [dict(zip(INPUTS, row, strict=True)) for row in zip(*columns, strict=True)]

    def matrix(self, payloads: Sequence[Payload]) -> np.ndarray:
        """Args:
            payloads: per pair {INPUTS name: value}.

        Returns:
            One row per pair, the four component values in INPUTS order.
        """
        return np.array([[p[k] for k in INPUTS] for p in payloads], dtype=np.float64).reshape(
            len(payloads), len(INPUTS))

    def per_sample(self, m: np.ndarray) -> dict[str, np.ndarray]:
        """Args:
            m: the component matrix (or resampled rows of it).

        Returns:
            {"radcliq_v1": per-report score}; the inverse has no per-report value.
        """
        return {"radcliq_v1": radcliq_v1(m)}

    def corpus(self, m: np.ndarray) -> dict[str, float]:
        """The mean per-report RadCliQ-v1 and its inverse, ReXrank's ranking number.

        Args:
            m: the component matrix (or resampled rows of it).

        Returns:
            {"radcliq_v1": mean, "inv_radcliq_v1": 1 / mean}; both NaN for no rows, the
            inverse infinite for a mean of exactly 0 (and negative for a negative mean).
        """
        if not len(m):
            return {"radcliq_v1": float("nan"), "inv_radcliq_v1": float("nan")}
        mean = float(radcliq_v1(m).mean())
        return {"radcliq_v1": mean, "inv_radcliq_v1": 1.0 / mean if mean else float("inf")}
