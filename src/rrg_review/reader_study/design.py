"""A reader study's design file (YAML or JSON) read into typed, frozen values.

A study is data: the file names its cases, readers, arms, design, sessions, washout, seed and
blinding. Everything wrong with a file is reported at once, one sentence per problem naming the
file and the field, so a study team fixes the file in one pass instead of one error per run; no
traceback reaches them. What needs the database (do these readers, presets and case keys exist?)
is checked when the study is created (app/reader_study/service.py), not here.

Example (YAML)::

    name: drafts-vs-none-2026
    cases: {source: iu-xray, split: test, keys_file: cases.txt}
    readers: [alice, bob]
    arms:
      - unassisted
      - draft:rrg24-baseline
      - reference
    design: crossover
    sessions: 3
    washout_days: 28
    seed: 20261125
    blinded: true
"""

from __future__ import annotations

import hashlib
import json
import re
import reprlib
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DESIGNS = ("parallel", "crossover")
ARM_KINDS = ("unassisted", "draft", "reference")
FIELDS = ("name", "description", "cases", "readers", "arms", "design", "sessions",
          "washout_days", "seed", "blinded")
CASE_FIELDS = ("source", "split", "keys", "keys_file")
MAX_FILE_BYTES = 1 << 20  # a design is a page of text; a larger file is a mistake
MAX_KEYS_FILE_BYTES = 64 << 20
MAX_SEED = 2**63  # fits the database's BIGINT
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PRESET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def _shown(value: Any) -> str:
    """A value quoted in a problem, cut short: a hostile file's nested aliases would take
    minutes (and gigabytes) to print in full."""
    cut = reprlib.Repr()
    cut.maxlevel, cut.maxlist, cut.maxdict, cut.maxstring, cut.maxother = 2, 4, 4, 60, 60
    return cut.repr(value)


def _key(key: Any) -> str:
    """A mapping key named as a field (YAML allows any value as a key)."""
    return key if isinstance(key, str) else _shown(key)


class DesignError(ValueError):
    """A design file with problems: every problem, one sentence each (file and field named)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Arm:
    """One condition a case is read under: no draft (empty boxes or a template), one model's
    draft, or the dataset's own report shown as if it were a draft (a human-written control)."""

    kind: str  # one of ARM_KINDS
    preset: str | None = None  # the model preset of a `draft` arm
    template: str | None = None  # the text an `unassisted` arm starts from (None: empty boxes)

    @property
    def spec(self) -> str:
        """How the design file names the arm: `unassisted`, `draft:<preset>`, `reference`."""
        return f"draft:{self.preset}" if self.kind == "draft" else self.kind


@dataclass(frozen=True)
class CaseSelection:
    """Which imaging studies are the cases: those of a source and/or split, narrowed to a list
    of study keys when one is given (inline or from a keys file, one key a line)."""

    source: str | None = None
    split: str | None = None
    keys: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StudyDesign:
    name: str
    cases: CaseSelection
    readers: tuple[str, ...]
    arms: tuple[Arm, ...]
    design: str  # one of DESIGNS
    sessions: int
    washout_days: float
    seed: int
    blinded: bool = True
    description: str = ""

    def canonical(self) -> str:
        """The design as sorted JSON: two files that mean the same study (comments, key order,
        a keys file instead of an inline list) have the same canonical text and hash."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def canonical_sha256(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()


@dataclass(frozen=True)
class DesignFile:
    """A design file as given (its text and hash are stored with the study) and what it means."""

    path: str
    text: str
    format: str  # "json" | "yaml"
    design: StudyDesign

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def load_design(path: str | Path) -> DesignFile:
    """Read and validate a design file (`.json` is JSON, anything else YAML).

    Raises:
        DesignError: the file cannot be read, is not YAML/JSON, or has problems (all listed).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise DesignError([f"{path}: the design file is {size} bytes; a design is at most "
                               f"{MAX_FILE_BYTES} bytes"])
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DesignError([f"{path}: cannot read the design file ({exc.strerror or exc})"]) \
            from None
    except UnicodeDecodeError:
        raise DesignError([f"{path}: the design file is not UTF-8 text"]) from None
    fmt = "json" if path.suffix.lower() == ".json" else "yaml"
    return DesignFile(str(path), text, fmt, parse_design(text, str(path), fmt, path.parent))


def parse_design(text: str, origin: str, fmt: str = "yaml",
                 base_dir: Path | None = None) -> StudyDesign:
    """Validate a design's text.

    Args:
        text: the file's content.
        origin: the file name the problems name.
        fmt: "json" or "yaml".
        base_dir: where a relative `keys_file` is looked for (the design file's folder).

    Raises:
        DesignError: every problem found, one sentence each.
    """
    raw = _decode(text, origin, fmt)
    if not isinstance(raw, dict):
        raise DesignError([f"{origin}: the design must be a mapping of fields "
                           f"({', '.join(FIELDS)})"])
    checker = _Checker(origin, base_dir or Path.cwd())
    design = checker.design(raw)
    if checker.problems or design is None:
        raise DesignError(checker.problems)
    return design


def _decode(text: str, origin: str, fmt: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DesignError([f"{origin}: not valid JSON (line {exc.lineno}, column "
                               f"{exc.colno}: {exc.msg})"]) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise DesignError([f"{origin}: not valid YAML ({where}{reason})"]) from None


class _Checker:
    """Collects the problems of one design file while reading its fields."""

    def __init__(self, origin: str, base_dir: Path) -> None:
        self.origin = origin
        self.base_dir = base_dir
        self.problems: list[str] = []

    def problem(self, field: str, reason: str) -> None:
        self.problems.append(f"{self.origin}: {field}: {reason}")

    def design(self, raw: dict[str, Any]) -> StudyDesign | None:
        for key in raw:
            if key not in FIELDS:
                self.problem(_key(key), f"unknown field (known: {', '.join(FIELDS)})")
        name = self.name(raw.get("name"))
        description = self.text(raw, "description")
        cases = self.cases(raw.get("cases"))
        readers = self.readers(raw.get("readers"))
        arms = self.arms(raw.get("arms"))
        design = raw.get("design")
        if design not in DESIGNS:
            self.problem("design", f"must be one of {', '.join(DESIGNS)} (got {_shown(design)})")
        sessions = self.sessions(raw, design, len(arms) if arms is not None else None)
        washout = self.washout(raw, design)
        seed = self.seed(raw.get("seed"))
        blinded = raw.get("blinded", True)
        if not isinstance(blinded, bool):
            self.problem("blinded", f"must be true or false (got {_shown(blinded)})")
        if (name is None or cases is None or readers is None or arms is None
                or sessions is None or washout is None or seed is None or self.problems):
            return None
        return StudyDesign(name=name, cases=cases, readers=readers, arms=arms,
                           design=str(design), sessions=sessions, washout_days=washout,
                           seed=seed, blinded=bool(blinded), description=description)

    def name(self, value: Any) -> str | None:
        if value is None:
            self.problem("name", "missing (the study's name, e.g. drafts-vs-none-2026)")
        elif not isinstance(value, str) or not _NAME_RE.match(value):
            self.problem("name", f"{_shown(value)} must be 1-64 letters, digits, '_', '.' "
                                 "or '-', starting with a letter or digit (quote it in YAML)")
        else:
            return value
        return None

    def text(self, raw: dict[str, Any], field: str) -> str:
        value = raw.get(field) or ""  # YAML's empty `description:` is null
        if not isinstance(value, str):
            self.problem(field, "must be text")
            return ""
        return value

    def cases(self, value: Any) -> CaseSelection | None:
        if value is None:
            self.problem("cases", "missing (a filter {source, split, keys | keys_file} or a "
                                  "list of study keys)")
            return None
        if isinstance(value, list):
            keys = self.keys("cases", value)
            return CaseSelection(keys=keys) if keys is not None else None
        if not isinstance(value, dict):
            self.problem("cases", "must be a filter {source, split, keys | keys_file} or a "
                                  "list of study keys")
            return None
        before = len(self.problems)
        for key in value:
            if key not in CASE_FIELDS:
                self.problem(f"cases.{_key(key)}",
                             f"unknown field (known: {', '.join(CASE_FIELDS)})")
        source, split = (self.optional_text(value, f) for f in ("source", "split"))
        keys = None
        if "keys" in value and "keys_file" in value:
            self.problem("cases", "give keys or keys_file, not both")
        elif "keys" in value:
            keys = self.keys("cases.keys", value["keys"])
        elif "keys_file" in value:
            keys = self.keys_file(value["keys_file"])
        if source is None and split is None and keys is None and len(self.problems) == before:
            self.problem("cases", "names no source, split or keys (every study of every "
                                  "dataset is never meant)")
        return CaseSelection(source, split, keys)

    def optional_text(self, raw: dict[str, Any], field: str) -> str | None:
        value = raw.get(field)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            self.problem(f"cases.{field}", f"must be text (got {_shown(value)})")
            return None
        return value.strip()

    def keys(self, field: str, value: Any) -> tuple[str, ...] | None:
        if not isinstance(value, list) or not value:
            self.problem(field, "must be a non-empty list of study keys")
            return None
        bad = [i for i, k in enumerate(value) if not isinstance(k, str | int) or
               isinstance(k, bool) or not str(k).strip()]
        for i in bad[:5]:
            self.problem(f"{field}[{i}]", f"{_shown(value[i])} is not a study key")
        keys = [str(k).strip() for k in value]
        return self.unique(field, keys) if not bad else None

    def unique(self, field: str, keys: list[str]) -> tuple[str, ...] | None:
        twice = [k for k, n in Counter(keys).items() if n > 1]
        if twice:
            self.problem(field, f"{len(twice)} listed more than once (first: {_shown(twice[0])})")
            return None
        return tuple(keys)

    def keys_file(self, value: Any) -> tuple[str, ...] | None:
        if not isinstance(value, str) or not value.strip():
            self.problem("cases.keys_file", "must be a file name")
            return None
        path = Path(value).expanduser()
        path = path if path.is_absolute() else self.base_dir / path
        # beside the design file (or in a folder under it): a design names its own case list,
        # and the keys that match no study are quoted back, so `../../etc/shadow` printed the
        # lines of a file the design had no business with
        folder = self.base_dir.resolve()
        if not path.resolve().is_relative_to(folder):
            self.problem("cases.keys_file", f"{value} is outside the design file's folder "
                                            f"{folder} (put the keys file beside the design)")
            return None
        try:
            if path.stat().st_size > MAX_KEYS_FILE_BYTES:
                self.problem("cases.keys_file", f"{path} is over {MAX_KEYS_FILE_BYTES} bytes "
                                                "(a million keys fit in less)")
                return None
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            self.problem("cases.keys_file", f"cannot read {path} ({reason})")
            return None
        keys = [s for line in lines if (s := line.strip()) and not s.startswith("#")]
        if not keys:
            self.problem("cases.keys_file", f"{path} holds no study key")
            return None
        return self.unique(f"cases.keys_file ({path})", keys)

    def readers(self, value: Any) -> tuple[str, ...] | None:
        if not isinstance(value, list) or not value:
            self.problem("readers", "must be a non-empty list of reader accounts")
            return None
        bad = [i for i, r in enumerate(value) if not isinstance(r, str) or not r.strip()]
        for i in bad:
            self.problem(f"readers[{i}]", f"{_shown(value[i])} is not an account name")
        return self.unique("readers", [r.strip() for r in value]) if not bad else None

    def arms(self, value: Any) -> tuple[Arm, ...] | None:
        if not isinstance(value, list) or not value:
            self.problem("arms", "must be a non-empty list (unassisted, draft:<preset>, "
                                 "reference)")
            return None
        arms = [self.arm(f"arms[{i}]", item) for i, item in enumerate(value)]
        if any(a is None for a in arms):
            return None
        specs = [a.spec for a in arms if a is not None]
        if self.unique("arms", specs) is None:
            return None
        return tuple(a for a in arms if a is not None)

    def arm(self, field: str, item: Any) -> Arm | None:
        template = None
        if isinstance(item, dict):
            extra = set(item) - {"arm", "template"}
            if extra:
                first = sorted(map(str, extra))[0]
                self.problem(field, f"unknown field {_shown(first)} (known: arm, template)")
                return None
            template = item.get("template")
            item = item.get("arm")
            if template is not None and (not isinstance(template, str) or item != "unassisted"):
                self.problem(field, "a template is text, and only an unassisted arm has one")
                return None
        if not isinstance(item, str):
            self.problem(field, f"{_shown(item)} is not an arm (unassisted, draft:<preset>, "
                                "reference)")
            return None
        if item in ("unassisted", "reference"):
            return Arm(item, template=template)
        kind, _, preset = item.partition(":")
        if kind != "draft" or not _PRESET_RE.match(preset):
            self.problem(field, f"unknown arm {_shown(item)} (unassisted, draft:<preset>, "
                                "reference)")
            return None
        return Arm("draft", preset=preset)

    def sessions(self, raw: dict[str, Any], design: Any, n_arms: int | None) -> int | None:
        """`n_arms` None: the arms have problems of their own (not counted against this)."""
        default = max(n_arms or 2, 2) if design == "crossover" else 1
        value = raw.get("sessions", default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 20:
            self.problem("sessions", f"must be a whole number from 1 to 20 (got {_shown(value)})")
            return None
        if design == "crossover" and (value < 2 or (n_arms is not None and n_arms < 2)):
            self.problem("sessions", "a crossover needs at least 2 sessions and 2 arms "
                                     f"(got {value} sessions, {n_arms} arms)")
            return None
        return int(value)

    def washout(self, raw: dict[str, Any], design: Any) -> float | None:
        value = raw.get("washout_days")
        if value is None:
            if design == "crossover":  # a parallel design never shows a reader a case twice
                self.problem("washout_days", "missing: days between a reader's sessions (a "
                                             "crossover reads every case again)")
                return None
            return 0.0
        if isinstance(value, bool) or not isinstance(value, int | float) or not \
                0 <= value <= 3650:
            self.problem("washout_days", f"must be a number of days from 0 to 3650 "
                                         f"(got {_shown(value)})")
            return None
        return float(value)

    def seed(self, value: Any) -> int | None:
        if value is None:
            self.problem("seed", "missing (a whole number: the allocation is made from it)")
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_SEED:
            self.problem("seed", f"must be a whole number from 0 to 2^63-1 (got {_shown(value)})")
        else:
            return int(value)
        return None
