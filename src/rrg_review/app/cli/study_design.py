"""`rrg-review study create FILE | list | show NAME | status NAME | worklist NAME READER`:
controlled reader studies from a design file (issue #20).

Whoever runs these commands holds the database, so `show --unblind` prints the arm key (which
preset each blinded arm code is); that is recorded in the audit trail. Every refusal is one
sentence per problem on stderr and exit status 2; nothing is half-created."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rrg_review.app.cli.options import add_db

if TYPE_CHECKING:
    from rrg_review.app.reader_study.service import ReaderStudyService, StudyStatus

Action = Callable[[argparse.Namespace, "ReaderStudyService"], int]


def add_actions(actions: Any) -> None:
    """Add this module's actions to the `study` command's sub-parsers."""
    p = actions.add_parser("create", help="create a reader study from a design file "
                           "(YAML or JSON)")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--replace", action="store_true",
                   help="re-allocate a study of the same name whose design changed, if none "
                        "of its readings has started")
    p.add_argument("--presets", metavar="FILE", help="extra model presets (JSON)")
    _common(p, _create)
    _common(actions.add_parser("list", help="the reader studies and their progress"), _list)
    p = actions.add_parser("show", help="a study's design and balance table")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--unblind", action="store_true",
                   help="also print the arm key (which arm each blinded code is; audited)")
    _common(p, _show)
    p = actions.add_parser("status", help="readings done per reader and session, washout "
                           "left")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--now", metavar="ISO_TIME", help=argparse.SUPPRESS)  # tests, replays
    _common(p, _status)
    p = actions.add_parser("worklist", help="a reader's readings of their open session")
    p.add_argument("name", metavar="NAME")
    p.add_argument("reader", metavar="READER")
    p.add_argument("--now", metavar="ISO_TIME", help=argparse.SUPPRESS)
    _common(p, _worklist)


def _common(p: argparse.ArgumentParser, body: Action) -> None:
    add_db(p)
    p.set_defaults(func=lambda args: _run(args, body))


def _run(args: argparse.Namespace, body: Action) -> int:
    """Open the service and run one action; a refusal is its sentences and exit status 2.
    A design file is read and checked before the database is opened (a bad file creates no
    database)."""
    from rrg_review.app.reader_study.service import ReaderStudyError, ReaderStudyService
    from rrg_review.app.settings import Settings
    from rrg_review.model.presets import load_presets
    from rrg_review.reader_study.design import DesignError, load_design

    try:
        if args.action == "create":
            args.design_file = load_design(args.file)
        settings = Settings.from_args(args.db, args.data_dir,
                                      presets=getattr(args, "presets", None))
        presets = load_presets(settings.presets_file) if args.action == "create" else {}
        service = ReaderStudyService(settings.open_database(create=False), presets)
        return body(args, service)
    except (DesignError, ReaderStudyError) as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a presets file or a --now that cannot be read
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def _create(args: argparse.Namespace, service: ReaderStudyService) -> int:
    created = service.create(args.design_file, replace=args.replace, actor=_actor(),
                             address="cli")
    what = {"created": "created", "replaced": "re-allocated (its design changed before any "
            "reading started)", "unchanged": "already exists with this design: unchanged"}
    print(f"study {created.name} {what[created.outcome]}: {created.readers} readers, "
          f"{created.cases} cases, {created.readings} readings")
    _warn(service.status(created.name))
    return 0


def _warn(status: StudyStatus) -> None:
    """What would spoil the study's readings: arms without drafts, readers who already
    worked on its cases outside it."""
    for code, n in status.missing_drafts.items():
        print(f"warning: arm {code}: {n} cases have no draft yet (draft them before reading "
              "starts: rrg-review draft --model PRESET; `study show --unblind` names it)")
    for reader, n in status.seen_outside.items():
        print(f"warning: {reader} already worked on {n} of the study's cases outside it "
              "(opened, edited or rated on the review worklist): those readings are not a "
              "first read, unblinded; choose other cases or readers, or note it in the analysis")


def _list(args: argparse.Namespace, service: ReaderStudyService) -> int:
    studies = service.studies()
    if not studies:
        print("no reader studies yet (rrg-review study create FILE)")
    for st in studies:
        print(f"{st.name}\t{st.design}, {st.sessions} session(s), {st.arms} arms\t"
              f"{st.readers} readers x {st.cases} cases\t{st.signed}/{st.readings} signed\t"
              f"{'blinded' if st.blinded else 'open'}")
    return 0


def _show(args: argparse.Namespace, service: ReaderStudyService) -> int:
    o = service.overview(args.name, unblind=args.unblind, actor=_actor(), address="cli")
    st = o.summary
    print(f"study {st.name}: {st.design}, {st.sessions} session(s), washout "
          f"{st.washout_days:g} days, seed {o.seed}, {'blinded' if st.blinded else 'open'}")
    if o.description:
        print(o.description)
    print(f"{st.readers} readers x {st.cases} cases: {st.readings} readings, {st.signed} "
          f"signed; created {st.created_at:%Y-%m-%d %H:%M} UTC")
    print(f"\ndesign file ({o.design_format}, sha256 {o.design_sha256}):")
    print(o.design_text.rstrip())
    print("\nbalance (readings per reader, arm and session):")
    print(o.balance.render(None if o.key is not None else o.codes))
    if o.key is not None:
        print("\narm key (unblinding):")
        for k in o.key:
            print(f"  {k.code} = {k.arm}" + (f" (template: {k.template!r})" if k.template
                                              else ""))
    return 0


def _now(args: argparse.Namespace) -> datetime | None:
    if not args.now:
        return None
    from datetime import UTC

    value = datetime.fromisoformat(args.now)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _status(args: argparse.Namespace, service: ReaderStudyService) -> int:
    status = service.status(args.name, _now(args))
    print(f"study {status.name} at {status.now:%Y-%m-%d %H:%M} UTC "
          f"(washout {status.washout.total_seconds() / 86400:g} days)")
    for r in status.readers:
        done = "  ".join(f"s{p.session} {p.signed}/{p.total}" for p in r.sessions)
        print(f"{r.reader}\t{done}\t{r.schedule.words(r.washout_left)}")
    _warn(status)
    return 0


def _worklist(args: argparse.Namespace, service: ReaderStudyService) -> int:
    worklist = service.worklist(args.name, args.reader, _now(args))
    plan = worklist.schedule
    if plan.open_session is None:
        print(plan.words(worklist.washout_left))
        return 0
    # the case by its study key, as the page's study worklist and `studies` name it (the
    # database's id told a trial's coordinator nothing), and the reading's id, which
    # `?reading=ID` opens
    keys = service.case_keys({r.study_id for r in worklist.readings})
    print("#\treading\tstudy\tarm\tstate")
    for r in worklist.readings:
        state = "signed" if r.signed_at else "opened" if r.opened_at else "to read"
        print(f"{r.position}\t{r.reading_id}\t{keys.get(r.study_id, '?')}\t{r.arm_code}\t"
              f"{state}")
    return 0
