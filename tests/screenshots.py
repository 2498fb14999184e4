"""Write the workstation's layout screenshots to docs/ (not part of any test run):

    python -m tests.screenshots [--out docs]

Starts the real app on a fresh demo database and photographs it in Debian's Chromium at
1366x768, 1920x1080 and 2560x1440, then the prior beside the current study and the enlarged
view (1920x1080); and the HTML analysis of a simulated reader study
(docs/reader-study-report.png, 1100x1180).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.browser import App, click_row, launch_browser, new_page, press_draft, wait_value

SCREENS = [(1366, 768), (1920, 1080), (2560, 1440)]
IMAGES_LOADED = ("() => [...document.querySelectorAll('#film img')]"
                 ".every(i => i.complete && i.naturalWidth > 0)")


def _ready(page, key: str) -> None:
    click_row(page, key)
    press_draft(page)
    wait_value(page, "findings", "v.length > 20")
    page.wait_for_function(IMAGES_LOADED)
    page.wait_for_function(
        "() => !document.querySelector('#metrics-notes').innerText.includes('Computing')")


def reader_study_report(browser, out: Path, tmp: Path) -> Path:
    """The analysis report of a simulated 10-reader, 90-case, 3-arm, 3-session crossover."""
    import math

    from PIL import Image

    from rrg_review.reader_study.analysis import analyze
    from rrg_review.reader_study.readings import from_columns
    from rrg_review.reader_study.report import write_html
    from rrg_review.reader_study.simulate import Simulation, columns

    table = columns(Simulation(
        readers=10, cases=90, sessions=3, arms=("unassisted", "draft:model-a", "draft:model-b"),
        log_effects={"draft:model-a": math.log(0.82), "draft:model-b": math.log(0.93)},
        accepted={"draft:model-a": 0.55, "draft:model-b": 0.42}, seed=7))
    html = write_html(analyze(from_columns(table, "example.csv")), tmp / "report.html")
    page = browser.new_page(viewport={"width": 1100, "height": 1180})
    page.goto(html.as_uri())
    path = out / "reader-study-report.png"
    page.screenshot(path=str(path))
    page.close()
    Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        app = App(Path(tmp) / "screenshots.sqlite")
        try:
            with sync_playwright() as p:
                browser = launch_browser(p)
                for width, height in SCREENS:
                    page = new_page(browser, app.url, width, height)
                    _ready(page, "DEMO-0002")
                    path = args.out / f"workstation-{width}.png"
                    page.screenshot(path=str(path))
                    print(path)
                    if width == 1920:
                        page.locator("#toggle-prior").click()
                        page.locator("#prior-panel img").wait_for()
                        page.wait_for_function(IMAGES_LOADED)
                        page.screenshot(path=str(args.out / "workstation-prior.png"))
                        print(args.out / "workstation-prior.png")
                        page.locator("#film .current img").first.click()
                        page.wait_for_function("() => window.rrgViewer.full")
                        page.screenshot(path=str(args.out / "workstation-enlarged.png"))
                        print(args.out / "workstation-enlarged.png")
                    page.close()
                print(reader_study_report(browser, args.out, Path(tmp)))
                browser.close()
        finally:
            app.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
