"""The metric registry is derived from the metric classes (each registers where it is defined):
what a built metric reports and which way it points agree with the registry's maps, and a
second registration of a name or a key is refused at import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rrg_review.metrics.config import MetricConfig
from rrg_review.metrics.registry import (
    KEY_TO_METRIC,
    LOWER_IS_BETTER,
    METRICS,
    REXRANK,
    RRG24,
    build,
    key_label,
)
from rrg_review.metrics.store import MetricDef, MetricStore


def test_every_registered_metric_reports_the_keys_and_directions_the_registry_says():
    built = dict(zip(METRICS.names, build(list(METRICS.names), MetricConfig(download=False)),
                     strict=True))
    for name, metric in built.items():
        assert metric.name == name
        assert metric.keys == METRICS[name].keys
        assert all(KEY_TO_METRIC[key] == name for key in metric.keys)
        for key in metric.keys:
            assert (key in LOWER_IS_BETTER) == (metric.direction(key) == "lower"), key
    assert sorted(KEY_TO_METRIC) == sorted(k for m in built.values() for k in m.keys)
    assert set(RRG24) | set(REXRANK) <= set(METRICS.names)
    assert LOWER_IS_BETTER == ("radcliq_v1",)
    assert key_label("radcliq_v1") == "radcliq_v1 (lower is better)"


def test_a_composite_is_built_from_the_registered_parts_it_names():
    radcliq, *parts = build(["radcliq_v1", "radgraph_combined", "bertscore_rexrank",
                             "semb_score", "bleu2"], MetricConfig(download=False))
    assert radcliq.components == tuple(parts)  # shared: each model loads once


def test_a_name_or_key_registered_twice_is_refused():
    store = MetricStore()
    store.add_def(MetricDef("a", ("a_1", "a_2"), (), lambda config: None))
    with pytest.raises(ValueError, match="metric 'a' is registered twice"):
        store.add_def(MetricDef("a", ("x",), (), lambda config: None))
    with pytest.raises(ValueError, match="metric 'b' reports 'a_2', which 'a' reports"):
        store.add_def(MetricDef("b", ("a_2",), (), lambda config: None))


def test_the_registry_stays_light_and_has_no_circle_to_import_through():
    code = ("import sys, rrg_review.metrics.base, rrg_review.metrics.registry; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["False", "False"]
