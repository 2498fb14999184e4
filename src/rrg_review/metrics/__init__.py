"""Scoring generated reports against references: the RRG24 metric set, per sample and per corpus,
cached, with bootstrap confidence intervals and paired tests.

`import metrics` loads no model and no heavy library; `metrics.registry.build()` creates metrics by
name and each loads its model on first use.
"""
