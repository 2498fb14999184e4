"""The one registry style for plug-ins (dataset importers, metrics): names mapped to
"module:attribute" strings, imported only when a plug-in is asked for, so listing or
resolving names never imports torch or a dataset reader (the lazy registry of RadEval)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LazyRegistry:
    """Plug-ins of one kind by name, in the order given (the order detection tries them)."""

    kind: str  # what a name names, for the error ("import format", "metric")
    targets: Mapping[str, str]  # name -> "package.module:Attribute"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.targets)

    def __contains__(self, name: object) -> bool:
        return name in self.targets

    def load(self, name: str, also_known: tuple[str, ...] = ()) -> Any:
        """The attribute `name` points at, its module imported now.

        Args:
            name: a registered name.
            also_known: names the caller accepts besides these (listed in the error).
        Raises:
            ValueError: an unknown name, naming every known one.
        """
        try:
            module, attribute = self.targets[name].split(":")
        except KeyError:
            known = ", ".join((*self.names, *also_known))
            raise ValueError(f"unknown {self.kind} {name!r} (known: {known})") from None
        return getattr(importlib.import_module(module), attribute)
