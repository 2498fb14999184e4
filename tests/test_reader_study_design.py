"""Reader study designs (issue #20), without a database: the design file's validation, the
seeded balanced allocation and the washout between sessions."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rrg_review.reader_study.allocation import allocate, seeded_order
from rrg_review.reader_study.design import DesignError, load_design
from rrg_review.reader_study.sessions import SessionProgress, describe_wait, schedule

GOOD = """\
name: drafts-vs-none
# a comment the hash of the meaning ignores
cases: {source: demo, split: test, keys_file: cases.txt}
readers: [alice, bob]
arms:
  - {arm: unassisted, template: "Heart: normal."}
  - draft:rrg24-baseline
  - reference
design: crossover
sessions: 3
washout_days: 28
seed: 7
"""


def _write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    (tmp_path / "cases.txt").write_text("# keys\nK1\n\nK2\nK3\n")
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_yaml_design_reads_into_typed_values(tmp_path):
    design_file = load_design(_write(tmp_path, GOOD))
    design = design_file.design
    assert design.name == "drafts-vs-none" and design.design == "crossover"
    assert design.cases.keys == ("K1", "K2", "K3") and design.cases.source == "demo"
    assert [a.spec for a in design.arms] == ["unassisted", "draft:rrg24-baseline", "reference"]
    assert design.arms[0].template == "Heart: normal."
    assert (design.sessions, design.washout_days, design.seed, design.blinded) == (3, 28.0, 7,
                                                                                   True)
    assert design_file.format == "yaml" and design_file.text == GOOD
    with pytest.raises(AttributeError):
        design.name = "changed"  # type: ignore[misc]


def test_the_same_study_as_json_has_the_same_meaning_hash(tmp_path):
    yaml_file = load_design(_write(tmp_path, GOOD))
    as_json = {"name": "drafts-vs-none", "seed": 7, "design": "crossover", "sessions": 3,
               "washout_days": 28, "readers": ["alice", "bob"],
               "arms": [{"arm": "unassisted", "template": "Heart: normal."},
                        "draft:rrg24-baseline", "reference"],
               "cases": {"source": "demo", "split": "test", "keys": ["K1", "K2", "K3"]}}
    json_file = load_design(_write(tmp_path, json.dumps(as_json), "study.json"))
    assert json_file.format == "json"
    assert json_file.design == yaml_file.design
    assert json_file.design.canonical_sha256 == yaml_file.design.canonical_sha256
    assert json_file.sha256 != yaml_file.sha256  # the text as given differs


def test_every_problem_is_listed_once_naming_the_file_and_the_field(tmp_path):
    bad = """\
name: "bad name!"
cases: {source: demo, colour: red}
readers: [alice, alice, 3]
arms: [unassisted, "draft:", magic, {arm: reference, template: x}]
design: zigzag
sessions: 0
washout_days: -1
seed: yes
blinded: maybe
extra: 1
"""
    path = _write(tmp_path, bad)
    with pytest.raises(DesignError) as caught:
        load_design(path)
    problems = caught.value.problems
    assert all(p.startswith(f"{path}: ") for p in problems), problems
    fields = [p.removeprefix(f"{path}: ").split(":")[0] for p in problems]
    for field in ("name", "cases.colour", "readers[2]", "arms[1]", "arms[2]", "arms[3]",
                  "design", "sessions", "washout_days", "seed", "blinded", "extra"):
        assert field in fields, (field, problems)
    assert len(problems) == len(set(problems))
    assert "Traceback" not in str(caught.value)


@pytest.mark.parametrize(("text", "field"), [
    ("name: x\ncases: [a, a]\nreaders: [r]\narms: [unassisted]\ndesign: parallel\nseed: 1",
     "cases"),
    ("name: x\ncases: {source: s}\nreaders: [r]\narms: [reference]\ndesign: crossover\n"
     "seed: 1\nwashout_days: 1", "sessions"),
    ("name: x\ncases: {source: s}\nreaders: [r]\narms: [reference, unassisted]\n"
     "design: crossover\nseed: 1", "washout_days"),
    ("name: x\ncases: {}\nreaders: [r]\narms: [reference]\ndesign: parallel\nseed: 1",
     "cases"),
    ("name: x\ncases: {keys_file: missing.txt}\nreaders: [r]\narms: [reference]\n"
     "design: parallel\nseed: 1", "cases.keys_file"),
    ("name: x\ncases: {source: s}\nreaders: [r]\narms: [reference, reference]\n"
     "design: parallel\nseed: 1", "arms"),
    ("name: x\ncases: {source: s}\nreaders: [r]\narms: [reference]\ndesign: parallel", "seed"),
    ("name: x\ncases: {source: s}\nreaders: [r]\narms: [magic]\ndesign: crossover\n"
     "washout_days: 1\nseed: 1", "arms[0]"),
    ("name: [x\n", None),
])
def test_single_problems_get_one_sentence(tmp_path, text, field):
    path = _write(tmp_path, text)
    with pytest.raises(DesignError) as caught:
        load_design(path)
    assert len(caught.value.problems) == 1, caught.value.problems
    message = caught.value.problems[0]
    assert message.startswith(f"{path}: ")
    if field is None:
        assert "not valid YAML (line" in message
    else:
        assert message.startswith(f"{path}: {field}: "), message


def test_an_empty_case_filter_is_named_beside_other_problems(tmp_path):
    path = _write(tmp_path, "name: bad name\ncases: {}\nreaders: []\narms: [reference]\n"
                            "design: parallel\nseed: 1\n")
    with pytest.raises(DesignError) as caught:
        load_design(path)
    fields = [p.removeprefix(f"{path}: ").split(":")[0] for p in caught.value.problems]
    assert fields == ["name", "cases", "readers"], caught.value.problems


def test_unreadable_and_non_mapping_files_are_one_sentence(tmp_path):
    with pytest.raises(DesignError, match="cannot read the design file"):
        load_design(tmp_path / "absent.yaml")
    with pytest.raises(DesignError, match=r"not valid JSON \(line 1"):
        load_design(_write(tmp_path, "{", "x.json"))
    with pytest.raises(DesignError, match="must be a mapping"):
        load_design(_write(tmp_path, "- a\n- b\n"))


def test_defaults_blinded_and_one_parallel_session(tmp_path):
    text = "name: p\ncases: [a]\nreaders: [r]\narms: [unassisted]\ndesign: parallel\nseed: 0\n"
    design = load_design(_write(tmp_path, text)).design
    assert (design.sessions, design.washout_days, design.blinded) == (1, 0.0, True)


# -- allocation ---------------------------------------------------------------------------------
def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


SIZES = [(r, c, a, s) for r, c, a, s in itertools.product((1, 2, 3, 5), (1, 4, 7, 12),
                                                           (1, 2, 3), (1, 2, 3))]


@pytest.mark.parametrize("seed", [0, 1, 2, 99, 2**40 + 3])
def test_parallel_allocations_are_balanced_within_one(seed):
    for n_readers, n_cases, n_arms, sessions in SIZES:
        readers, cases, arms = _names("r", n_readers), _names("c", n_cases), _names("a", n_arms)
        got = allocate(readers, cases, arms, design="parallel", sessions=sessions, seed=seed)
        size = (n_readers, n_cases, n_arms, sessions)
        assert got.balance.spread <= 1, (size, got.balance.render())
        pairs = Counter((a.reader, a.case) for a in got.readings)
        assert set(pairs) == set(itertools.product(readers, cases)), size
        assert set(pairs.values()) == {1}, size  # each reader reads each case once
        _case_balance(got.readings, n_arms, per_session=False)
        _orders_are_one_to_n(got.readings)


@pytest.mark.parametrize("seed", [0, 1, 2, 99, 2**40 + 3])
def test_crossover_allocations_switch_arms_and_are_balanced_within_one(seed):
    for n_readers, n_cases, n_arms, sessions in SIZES:
        if n_arms < 2 or sessions < 2:
            continue
        readers, cases, arms = _names("r", n_readers), _names("c", n_cases), _names("a", n_arms)
        got = allocate(readers, cases, arms, design="crossover", sessions=sessions, seed=seed)
        size = (n_readers, n_cases, n_arms, sessions)
        assert got.balance.spread <= 1, (size, got.balance.render())
        arm = {(a.reader, a.case, a.session): a.arm for a in got.readings}
        assert len(arm) == len(got.readings) == n_readers * n_cases * sessions, size
        for reader, case in itertools.product(readers, cases):
            for s in range(1, sessions):
                assert arm[(reader, case, s)] != arm[(reader, case, s + 1)], size
            if sessions <= n_arms:  # never the same arm twice while arms are left
                assert len({arm[(reader, case, s)] for s in range(1, sessions + 1)}) == \
                    sessions
        _case_balance(got.readings, n_arms, per_session=True)
        _orders_are_one_to_n(got.readings)


def _case_balance(readings, n_arms, *, per_session):
    """Per case (and session), the arms over the readers are within +-1."""
    by_case: dict[tuple[str, int], Counter[str]] = {}
    for a in readings:
        by_case.setdefault((a.case, a.session if per_session else 0), Counter())[a.arm] += 1
    for key, counts in by_case.items():
        full = [counts.get(arm, 0) for arm in {a.arm for a in readings}]
        assert max(full) - min(full) <= 1, (key, counts)


def _orders_are_one_to_n(readings):
    by_cell: dict[tuple[str, int], list[int]] = {}
    for a in readings:
        by_cell.setdefault((a.reader, a.session), []).append(a.order)
    for orders in by_cell.values():
        assert sorted(orders) == list(range(1, len(orders) + 1))


def test_allocation_is_fixed_by_the_seed_not_by_the_listed_order():
    readers, cases, arms = _names("r", 4), _names("c", 30), ["unassisted", "draft:x", "reference"]
    one = allocate(readers, cases, arms, design="crossover", sessions=3, seed=5)
    again = allocate(readers[::-1], cases[::-1], arms[::-1], design="crossover", sessions=3,
                     seed=5)
    assert set(one.readings) == set(again.readings)
    other = allocate(readers, cases, arms, design="crossover", sessions=3, seed=6)
    assert set(one.readings) != set(other.readings)
    # a known answer: the hash order does not drift with library versions
    assert seeded_order(["a", "b", "c", "d"], 1, "cases") == \
        seeded_order(["d", "c", "b", "a"], 1, "cases")
    assert one.to_json() == allocate(readers, cases, arms, design="crossover", sessions=3,
                                     seed=5).to_json()


def test_case_order_differs_between_readers_and_sessions():
    readers, cases = _names("r", 2), _names("c", 40)
    got = allocate(readers, cases, ["u", "d"], design="crossover", sessions=2, seed=3)
    orders = {(a.reader, a.session): [] for a in got.readings}
    for a in sorted(got.readings, key=lambda a: a.order):
        orders[(a.reader, a.session)].append(a.case)
    assert len({tuple(v) for v in orders.values()}) == 4


def test_arm_codes_are_letters_in_a_seeded_order():
    arms = ["unassisted", "draft:a", "draft:b", "reference"]
    codes = [allocate(["r"], ["c"], arms, design="parallel", sessions=1, seed=s).arm_codes
             for s in range(8)]
    assert all([c for _, c in cs] == ["A", "B", "C", "D"] for cs in codes)
    assert len({cs[0][0] for cs in codes}) > 1  # "A" is not always the first listed arm


def test_impossible_designs_are_refused():
    with pytest.raises(ValueError, match="cannot be allocated"):
        allocate(["r"], ["c"], ["a"], design="crossover", sessions=2, seed=1)
    with pytest.raises(ValueError, match="without repeats"):
        allocate(["r", "r"], ["c"], ["a"], design="parallel", sessions=1, seed=1)


# -- sessions and washout ------------------------------------------------------------------------
T0 = datetime(2026, 11, 1, 9, tzinfo=UTC)
WASHOUT = timedelta(days=14)


def test_session_two_opens_only_after_the_washout():
    started = [SessionProgress(1, 3, 1, T0), SessionProgress(2, 3, 0, None)]
    assert schedule(started, WASHOUT, T0).open_session == 1
    ended = [SessionProgress(1, 3, 3, T0), SessionProgress(2, 3, 0, None)]
    waiting = schedule(ended, WASHOUT, T0 + timedelta(days=13, hours=23))
    assert (waiting.open_session, waiting.next_session) == (None, 2)
    assert waiting.opens_at == T0 + WASHOUT
    assert waiting.wait(T0 + timedelta(days=13)) == timedelta(days=1)
    opened = schedule(ended, WASHOUT, T0 + WASHOUT)
    assert opened.open_session == 2 and opened.wait(T0 + WASHOUT) == timedelta(0)
    done = [SessionProgress(1, 3, 3, T0), SessionProgress(2, 3, 3, T0 + WASHOUT)]
    assert schedule(done, WASHOUT, T0 + WASHOUT).finished


def test_an_empty_session_passes_on_the_washout_of_the_one_before():
    sessions = [SessionProgress(1, 2, 2, T0), SessionProgress(2, 0, 0, None),
                SessionProgress(3, 2, 0, None)]
    assert schedule(sessions, WASHOUT, T0 + timedelta(days=1)).next_session == 3
    assert schedule(sessions, WASHOUT, T0 + WASHOUT).open_session == 3


def test_the_readme_example_is_a_valid_design(tmp_path):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("### The design file", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "cases.txt").write_text("CXR1\nCXR2\n")
    path = tmp_path / "drafts-vs-none.yaml"
    path.write_text(example)
    design = load_design(path).design
    assert design.name == "drafts-vs-none-2026" and design.cases.keys == ("CXR1", "CXR2")
    assert [a.spec for a in design.arms] == ["unassisted", "draft:rrg24-baseline", "reference"]


@pytest.mark.parametrize("n_arms", [2, 4, 6])
def test_crossovers_with_an_even_number_of_arms_balance_carry_over(n_arms):
    """Williams squares: over the readers and cases, every arm is followed by every other arm
    equally often (here R x C is a multiple of A, so exactly)."""
    readers, cases, arms = _names("r", 3), _names("c", 2 * n_arms), _names("a", n_arms)
    got = allocate(readers, cases, arms, design="crossover", sessions=n_arms, seed=4)
    arm = {(a.reader, a.case, a.session): a.arm for a in got.readings}
    follows = Counter((arm[(r, c, s)], arm[(r, c, s + 1)])
                      for r in readers for c in cases for s in range(1, n_arms))
    assert set(follows) == {(a, b) for a in arms for b in arms if a != b}
    assert len(set(follows.values())) == 1, follows
    assert got.balance.spread <= 1


def test_the_balance_table_renders_blinded_codes_in_code_order():
    got = allocate(["ann", "bob"], _names("c", 5), ["unassisted", "draft:m"],
                   design="parallel", sessions=1, seed=2)
    codes = dict(got.arm_codes)
    lines = got.balance.render(codes).splitlines()
    assert lines[0].split() == ["reader", "A", "s1", "B", "s1"]
    by_code = {code: arm for arm, code in codes.items()}
    ann = [int(n) for n in lines[1].split()[1:]]
    assert ann == [got.balance.count("ann", by_code[c], 1) for c in ("A", "B")]
    assert "draft:m" in got.balance.render() and "draft:m" not in got.balance.render(codes)


def test_waits_read_as_people_say_them():
    assert describe_wait(timedelta(days=3)) == "3 d 0 h"
    assert describe_wait(timedelta(hours=30)) == "1 d 6 h"
    assert describe_wait(timedelta(minutes=12, seconds=20)) == "12 min"
    assert describe_wait(timedelta(seconds=-5)) == "under 1 min"


def test_yaml_that_would_run_code_or_explode_is_refused_in_one_sentence(tmp_path):
    path = _write(tmp_path, "name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(DesignError, match="not valid YAML") as caught:
        load_design(path)
    assert len(caught.value.problems) == 1
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)) + "readers: *i\n"
    with pytest.raises(DesignError) as caught:
        load_design(_write(tmp_path, laughs))
    assert any("readers[0]" in p for p in caught.value.problems)
    assert all(len(p) < 300 for p in caught.value.problems)  # quoted values are cut short
    laughs = laughs.replace("readers: *i\n", "? *i\n: 1\ncases: {? *i\n : 1}\n")
    with pytest.raises(DesignError, match="found unhashable key") as caught:
        load_design(_write(tmp_path, laughs))  # a list as a key
    assert len(caught.value.problems) == 1
    with (tmp_path / "huge.txt").open("wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: no disk used
    with pytest.raises(DesignError, match=r"huge\.txt is over 67108864 bytes"):
        load_design(_write(tmp_path, "name: x\ncases: {keys_file: huge.txt}\nreaders: [r]\n"
                                     "arms: [unassisted]\ndesign: parallel\nseed: 1\n"))
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(DesignError, match="at most 1048576 bytes"):
        load_design(big)


def test_a_keys_file_outside_the_design_files_folder_is_refused_unread(tmp_path):
    """A trial's design named `keys_file: ../../../../etc/shadow`: it was read and its lines
    quoted back as "study keys that match no stored study". The keys file sits beside the
    design (or in a folder under it); anything else is one sentence, the file unread."""
    folder = tmp_path / "studies"
    (folder / "lists").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:*:20228:0:99999:7:::\n")
    (folder / "lists" / "cases.txt").write_text("CXR1\nCXR2\n")
    rest = "readers: [r]\narms: [unassisted]\ndesign: parallel\nseed: 1\n"
    for name in ("../secret.txt", str(secret), "lists/../../secret.txt"):
        with pytest.raises(DesignError) as caught:
            load_design(_write(folder, f"name: x\ncases: {{keys_file: '{name}'}}\n{rest}"))
        [problem] = caught.value.problems
        assert "outside the design file's folder" in problem and "root:" not in problem
    link = folder / "link.txt"
    link.symlink_to(secret)  # a link out of the folder is outside it too
    with pytest.raises(DesignError, match="outside the design file's folder"):
        load_design(_write(folder, f"name: x\ncases: {{keys_file: link.txt}}\n{rest}"))
    design = load_design(_write(folder, f"name: x\ncases: {{keys_file: lists/cases.txt}}\n{rest}"))
    assert design.design.cases.keys == ("CXR1", "CXR2")
