"""Metrics registered where they are defined (MONAI's `ComponentStore.add_def` style): each
metric class says its name, the keys it reports and which way each is better once, on itself,
and the registry derives what it maps (key -> metric, lower-is-better keys) from here.

Registering costs nothing heavy: the metric modules import torch, transformers and their
metric packages only when a metric loads its model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rrg_review.metrics.base import Metric
    from rrg_review.metrics.config import MetricConfig

    MetricT = TypeVar("MetricT", bound=type[Metric])


@dataclass(frozen=True)
class MetricDef:
    """One registered metric: how to build it and what it reports."""

    name: str
    keys: tuple[str, ...]
    lower_is_better: tuple[str, ...]  # of `keys`; every other key: higher is better
    build: Callable[[MetricConfig], Metric] | None  # None for a composite
    components: tuple[str, ...] = ()  # a composite's parts, built first and shared
    compose: Callable[[Sequence[Metric]], Metric] | None = None


class MetricStore:
    """Registered metrics by name, in the order they were registered."""

    def __init__(self) -> None:
        self._defs: dict[str, MetricDef] = {}

    def add_def(self, definition: MetricDef) -> None:
        """Register one metric; a second one under the same name or reporting a key another
        reports is a programming error, refused at import."""
        if definition.name in self._defs:
            raise ValueError(f"metric {definition.name!r} is registered twice")
        taken = {k: d.name for d in self._defs.values() for k in d.keys}
        clash = [k for k in definition.keys if k in taken]
        if clash:
            raise ValueError(f"metric {definition.name!r} reports {clash[0]!r}, which "
                             f"{taken[clash[0]]!r} reports")
        self._defs[definition.name] = definition

    def metric(self, cls: MetricT) -> MetricT:
        """Class decorator: register a metric class under its `name`, with its `keys` and
        `directions`; built by `cls.from_config`, or from its `components` when it has any
        (`part_names`: a composite, built as `cls(parts)`)."""
        components: tuple[str, ...] = tuple(getattr(cls, "part_names", ()))
        self.add_def(MetricDef(
            name=cls.name, keys=tuple(cls.keys),
            lower_is_better=tuple(k for k in cls.keys if cls.directions.get(k) == "lower"),
            build=None if components else cls.from_config, components=components,
            compose=cls if components else None))
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._defs

    def __getitem__(self, name: str) -> MetricDef:
        return self._defs[name]

    def __iter__(self) -> Iterator[MetricDef]:
        return iter(self._defs.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._defs)


METRICS = MetricStore()
