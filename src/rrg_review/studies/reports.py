"""Split free-text radiology reports into their labelled sections."""

from __future__ import annotations

import re

_HEADERS = ("indication", "history", "comparison", "technique", "findings", "impression")
_ALIASES = {"history": "indication", "clinical history": "indication", "conclusion": "impression"}
_HEADER_RE = re.compile(
    r"^\s*(indication|clinical history|history|comparison|technique|findings|impression|conclusion)"
    r"\s*:\s*",
    re.IGNORECASE | re.MULTILINE,
)


def clean(text: str | None) -> str | None:
    """Collapse whitespace; empty text becomes None."""
    if text is None:
        return None
    out = " ".join(str(text).split())
    return out or None


def split_sections(text: str) -> dict[str, str]:
    """Map of lower-case section name -> text for 'FINDINGS: ...' style reports."""
    matches = list(_HEADER_RE.finditer(text))
    sections: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        name = m.group(1).lower()
        name = _ALIASES.get(name, name)
        body = clean(text[m.end():end])
        if body and name in _HEADERS:
            sections[name] = body
    return sections
