"""The enlarged view windows the full-bit-depth pixels in the browser (issue #21): a right-drag
changes window/level at frame rate with no request, the canvas equals the server's display
pipeline for the same window, the controls always say what is on screen, Level/Window move every
file the same way, and the prior opens as its own viewport filling the window. One app (with a
2,000 x 2,500 16-bit PNG, a MONOCHROME1 DICOM and a JPEG 2000 DICOM) for the whole module."""

from __future__ import annotations

import base64
import functools
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.viewer.service import binned
from rrg_review.studies.pixels import DecodedImage, decode, window_level
from rrg_review.studies.records import ImageSource
from tests.browser import App, click_row, close_pages, wait_text
from tests.conftest import rg1
from tests.layouts import SPACING, calibrated_dicom

pytest_plugins = ["tests.browser"]  # the browser fixture
pytestmark = [pytest.mark.browser, pytest.mark.slow]

BIG = (2500, 2000)  # rows, cols


def big_png(path: Path) -> Path:
    """A 16-bit film-like PNG, 2,000 wide and 2,500 high: smooth gradients plus a fine pattern,
    so every window shows structure (values 1,000..~61,000)."""
    y, x = np.indices(BIG, dtype=np.float64)
    values = (1000 + 30000 * (1 + np.sin(x / 170.0) * np.cos(y / 230.0))
              + 97 * ((x * 7 + y * 13) % 31))
    PILImage.fromarray(values.astype(np.uint16)).save(path)
    return path


NONSQUARE = (1000, 500)  # rows, cols of the non-square film: 0.1 mm rows, 0.2 mm columns
CIRCLE_MM = 50.0


def circle_dicom(path: Path) -> Path:
    """A film with non-square pixels (ImagerPixelSpacing 0.1\\0.2, no PixelSpacing): a bright
    50 mm disc, 500 rows tall and 250 columns wide, on a dark ground; 12-bit MONOCHROME2."""
    import pydicom

    y, x = np.indices(NONSQUARE, dtype=np.float64)
    mm = np.hypot((y - 500) * 0.1, (x - 250) * 0.2)
    values = np.where(mm <= CIRCLE_MM / 2, 3000, 200).astype(np.uint16)
    ds = pydicom.dcmread(rg1("RG1_UNCR.dcm"))
    del ds.PixelSpacing
    ds.ImagerPixelSpacing = [0.1, 0.2]
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = NONSQUARE
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.WindowCenter, ds.WindowWidth = 1600, 3200
    ds.PixelData = values.tobytes()
    ds.save_as(path)
    return path


def add_lateral(db, study_id: int) -> None:
    """A second image (a lateral, the study's first file again) for a study of one image."""
    from sqlalchemy import insert, select, update

    from rrg_review.db.models import Image, Study

    with db.engine.begin() as conn:
        query = select(Image.__table__).where(Image.study_id == study_id)
        first = conn.execute(query).mappings().one()
        row = {k: v for k, v in first.items() if k != "id"}
        conn.execute(insert(Image), [{**row, "position": 1, "view_position": "LL",
                                      "view_group": "lateral"}])
        conn.execute(update(Study).where(Study.id == study_id).values(image_count=2))


@pytest.fixture(scope="module")
def films(tmp_path_factory, database_templates, browser):
    """The app, and the file behind each study key."""
    from rrg_review.app.settings import Settings

    root = tmp_path_factory.mktemp("viewer-canvas")
    png = big_png(root / "big16.png")
    settings = Settings.from_args(str(root / "app.sqlite"))
    database_templates.copy_sqlite("migrated", settings)
    db = settings.open_database()
    try:  # BIG2's prior is BIG1 (the same patient, a day earlier)
        add_studies(db, 2, source="big", prefix="BIG",
                    image=SyntheticImage(str(png), *BIG, bits_stored=16, fmt="png"))
        add_studies(db, 1, source="mono", prefix="MONO",
                    image=SyntheticImage(rg1("RG1_UNCI.dcm"), 1955, 1841, 15, "MONOCHROME1"))
        add_studies(db, 1, source="j2k", prefix="JTK",
                    image=SyntheticImage(rg1("RG1_J2KR.dcm"), 1955, 1841, 15, "MONOCHROME1"))
        cal = calibrated_dicom(root / "calibrated.dcm")
        add_studies(db, 1, source="cal", prefix="CAL",
                    image=SyntheticImage(str(cal), 1955, 1841, 15, "MONOCHROME1"))
        circle = circle_dicom(root / "circle.dcm")
        add_studies(db, 1, source="nsq", prefix="NSQ",
                    image=SyntheticImage(str(circle), *NONSQUARE, 12, "MONOCHROME2"))
        two = add_studies(db, 2, source="two", prefix="TWO",  # TWO2: frontal, lateral; prior TWO1
                          image=SyntheticImage(str(circle), *NONSQUARE, 12, "MONOCHROME2"))
        add_lateral(db, two[1])
    finally:
        db.dispose()
    running = App(root / "app.sqlite", "--no-demo", "--no-predraft")
    files = {"BIG2": str(png), "BIG1": str(png), "MONO1": rg1("RG1_UNCI.dcm"),
             "JTK1": rg1("RG1_J2KR.dcm"), "CAL1": str(cal), "NSQ1": str(circle)}
    yield running, files
    running.stop(close_first=lambda: close_pages(browser))


class Requests:
    """Every request the page makes: none may leave the machine, and a drag makes none."""

    def __init__(self, page, origin: str) -> None:
        self.urls: list[str] = []
        self.origin = origin
        self.bodies: list[str] = []
        page.on("request", self._seen)

    def _seen(self, request) -> None:
        self.urls.append(request.url)
        self.bodies.append(request.post_data or "")

    def outside(self) -> list[str]:
        return [u for u in self.urls if not u.startswith(self.origin)
                and not u.startswith(("data:", "blob:"))]


def open_page(browser, app: App, width: int = 1366, height: int = 768):
    page = browser.new_page(viewport={"width": width, "height": height})
    requests = Requests(page, app.url.rstrip("/"))
    page.goto(app.url)
    page.locator("#film [data-study]").first.wait_for(timeout=90_000)
    return page, requests


def enlarge(page, key: str, film: str = "current") -> None:
    """Open study `key` and enlarge its first image (of the prior with film="prior")."""
    if key not in page.locator("#film-head").inner_text():
        click_row(page, key)
        wait_text(page, "film-head", key)
    page.locator(f"#film .film-study.{film} [data-index='0'] img").click()
    try:
        page.wait_for_function("() => window.rrgViewer.full", timeout=90_000)
    except Exception as exc:  # what the page showed instead (a rare CI failure, not reproduced)
        raise AssertionError(f"{key}: the full image never came; the page: "
                             f"{page.evaluate(VIEW_STATE)}") from exc


# the enlarged view's state, for a failure's message
VIEW_STATE = """() => {
  const v = window.rrgViewer, text = (id) => (document.getElementById(id) || {}).innerText;
  const data = document.querySelector('#wl-data textarea');
  return {pick: v.pick, full: v.full, requested: v.requested || null,
          meta: v.meta && {url: v.meta.url, study: v.meta.study, pick: v.meta.pick},
          open: !!document.querySelector('[data-open]'), status: text('wl-status'),
          head: text('film-head'), save: text('save-status'), body: document.body.className,
          data: data ? data.value.slice(0, 300) : null};
}"""


READ_BACK = """(step) => {
  const c = document.querySelector('#wl-canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const values = [];
  for (let y = 0; y < c.height; y += step)
    for (let x = 0; x < c.width; x += step) values.push(d[(y * c.width + x) * 4]);
  const v = window.rrgViewer;
  return {width: c.width, height: c.height, values, c: v.c, w: v.w, inv: v.inv,
          shown: {c: document.querySelector('#wl-center').value,
                  w: document.querySelector('#wl-width').value,
                  inv: document.querySelector('#wl-invert').checked,
                  preset: document.querySelector('#wl-preset').value}};
}"""


# A canvas's grey values (its red channel) as base64: a 2,000 x 2,500 film read back as a JSON
# array of 5 million numbers took Playwright and the browser most of a minute, under load.
GREY_B64 = """(c) => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const n = c.width * c.height, bytes = new Uint8Array(n);
  for (let i = 0; i < n; i++) bytes[i] = d[i * 4];
  let text = '';
  for (let i = 0; i < n; i += 32768)
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768));
  return btoa(text);
}"""


def canvas_grey(page, selector: str) -> np.ndarray:
    """The grey values of the canvas `selector`, as rows x columns."""
    size = page.evaluate("(q) => { const c = document.querySelector(q); "
                         "return [c.height, c.width]; }", selector)
    data = page.locator(selector).evaluate(GREY_B64)
    return np.frombuffer(base64.b64decode(data), dtype=np.uint8).reshape(size).astype(float)


@functools.lru_cache(maxsize=4)
def decoded(path: str) -> DecodedImage:
    """A film decoded once per test process (a test compares the canvas a dozen times, and
    the JPEG 2000 film took most of a second to decode each time)."""
    return decode(ImageSource(name=path, path=path))


def expected(path: str, center: float, width: float, invert: bool, step: int) -> np.ndarray:
    """The server's display pipeline for this window (and invert, as Desk.render does it)."""
    out = window_level(decoded(path), center, width)
    return (255 - out if invert else out)[::step, ::step].ravel()


def canvas_matches(page, path: str, step: int = 7) -> dict:
    """The canvas, read back, equals the pipeline for the values its controls show (within 1
    grey level); returns what was read."""
    got = page.evaluate(READ_BACK, step)
    shown = got["shown"]
    center, width = float(shown["c"]), float(shown["w"])
    want = expected(path, center, width, shown["inv"], step)
    values = np.array(got["values"], dtype=np.int16)
    assert values.shape == want.shape, (values.shape, want.shape)
    diff = np.abs(values - want.astype(np.int16))
    assert diff.max() <= 1, (f"{int((diff > 1).sum())} of {diff.size} pixels differ by more "
                             f"than 1 (max {diff.max()}) at {shown}")
    return got


def test_right_drag_windows_at_frame_rate_with_no_request(browser, films):
    app, files = films
    page, requests = open_page(browser, app)
    enlarge(page, "BIG2")
    size = page.evaluate("() => [rrgViewer.img.width, rrgViewer.img.height]")
    assert size == [BIG[1], BIG[0]]
    before = len(requests.urls)
    # a real right-drag: up is brighter, right is wider
    c0, w0 = page.evaluate("() => [rrgViewer.c, rrgViewer.w]")
    page.mouse.move(600, 400)
    page.mouse.down(button="right")
    for i in range(1, 6):
        page.mouse.move(600 + 10 * i, 400 - 10 * i)
    page.mouse.up(button="right")
    c1, w1 = page.evaluate("() => [rrgViewer.c, rrgViewer.w]")
    assert c1 < c0 and w1 > w0, (c0, w0, c1, w1)  # MONOCHROME2: brighter = a lower level
    # frame rate: a drag event every animation frame for 2 s, frames counted
    figures = page.evaluate("""() => new Promise((done) => {
      const stage = document.querySelector('#wl-stage'), v = window.rrgViewer;
      stage.dispatchEvent(new MouseEvent('mousedown', {button: 2, clientX: 500, clientY: 400,
                                                       bubbles: true}));
      const f0 = v.frames, ms0 = v.dragMs, t0 = performance.now(); let i = 0;
      const tick = () => {
        i += 1;
        window.dispatchEvent(new MouseEvent('mousemove', {clientX: 500 + (i % 50),
                                                         clientY: 400 - (i % 37)}));
        // 2 s, and at least 20 frames to judge (at a load of 20 the frame loop gave 11 in
        // 2 s): the drawing per frame is the figure, not how often a starved loop ticks
        const ms = performance.now() - t0;
        if ((ms < 2000 || v.frames - f0 < 20) && ms < 30000) {
          requestAnimationFrame(tick); return;
        }
        window.dispatchEvent(new MouseEvent('mouseup', {}));
        requestAnimationFrame(() => done({frames: v.frames - f0, moves: i,
                                          seconds: (performance.now() - t0) / 1000,
                                          drawing_ms: v.dragMs - ms0}));
      };
      requestAnimationFrame(tick);
    })""")
    fps = figures["frames"] / figures["seconds"]
    # the frames the drawing itself allows: on a quiet machine the browser's frame clock (60/s)
    # is the limit; at a load of 10 on 2 cores Chromium's own frame loop is starved, whatever
    # the page draws, so the assertion is on the drawing and both figures are printed
    frame_ms = figures["drawing_ms"] / max(figures["frames"], 1)
    # the page's autosave timer ticks every 4 s whatever the viewer does (its heartbeat of
    # active time): counted apart; every other request during the drag is the viewer's
    timer = page.evaluate("() => window.gradio_config.components"
                          ".find((c) => c.type === 'timer').id")
    during = list(zip(requests.urls[before:], requests.bodies[before:], strict=True))
    ticks = [u for u, body in during if f'"trigger_id":{timer},' in body]
    during = [u for u, body in during if f'"trigger_id":{timer},' not in body]
    full_ms = page.evaluate("""() => { const t0 = performance.now();
      for (let i = 0; i < 5; i++) rrgViewer.draw(); return (performance.now() - t0) / 5; }""")
    print(f"\nright-drag window/level on a 2000x2500 16-bit image: {fps:.1f} frames/s shown, "
          f"{frame_ms:.1f} ms of drawing per frame (room for {1000 / frame_ms:.0f} frames/s) "
          f"({figures['frames']} frames, {figures['moves']} moves, {figures['seconds']:.2f} s), "
          f"{len(during)} requests during the drag (besides {len(ticks)} autosave ticks); "
          f"a full-resolution frame (drawn when the drag ends) takes {full_ms:.0f} ms")
    assert during == [], during
    assert frame_ms <= 1000 / 30 and figures["frames"] >= 20, figures
    canvas_matches(page, files["BIG2"], step=13)  # what is on screen after the drag
    assert requests.outside() == [], requests.outside()


def test_quick_invert_preset_and_typed_values_never_disagree_with_the_image(browser, films):
    app, files = films
    page, requests = open_page(browser, app)
    enlarge(page, "MONO1")
    path = files["MONO1"]
    got = canvas_matches(page, path)
    assert got["shown"]["preset"] == "file default" and not got["shown"]["inv"]
    invert = page.locator("#wl-invert")
    invert.click()
    invert.click()  # ticked and unticked within a few ms: not inverted, and the box says so
    assert not canvas_matches(page, path)["inv"]
    invert.click()
    assert canvas_matches(page, path)["shown"]["inv"]
    for preset in ("lung", "bone", "soft tissue", "full range", "file default"):
        page.locator("#wl-preset").select_option(preset)
        shown = page.evaluate(READ_BACK, 500)["shown"]
        # the preset's own name and round values (a level read 12164.26000000001: #21)
        assert shown["preset"] == preset, shown
        assert re.fullmatch(r"-?\d+(\.\d{1,2})?", shown["c"]) and re.fullmatch(
            r"\d+(\.\d{1,2})?", shown["w"]), shown
    got = canvas_matches(page, path)
    assert got["shown"]["preset"] == "file default" and got["shown"]["inv"]
    page.locator("#wl-center").fill("9000")
    page.keyboard.press("Enter")  # Enter applies at once
    got = canvas_matches(page, path)
    assert got["c"] == 9000 and got["shown"]["preset"] == "custom", got["shown"]
    # and gives the keys back to the view (P typed "1000p" into the box: trial 8, low)
    assert page.evaluate("() => document.activeElement.id") != "wl-center"
    page.locator("#wl-width").fill("5000")
    page.locator("#wl-center").click()  # blur applies too
    got = canvas_matches(page, path)
    assert got["w"] == 5000 and got["shown"]["preset"] == "custom", got["shown"]
    # a value typed and then a drag on the image: the typed value is applied first, and the
    # box follows the drag (a focused box kept its typed text while the image changed)
    page.locator("#wl-center").fill("12000")
    page.mouse.move(600, 400)
    page.mouse.down(button="right")
    page.mouse.move(630, 380, steps=3)
    page.mouse.up(button="right")
    got = canvas_matches(page, path)
    assert float(got["shown"]["c"]) == got["c"] != 12000, got["shown"]
    page.locator("#wl-preset").select_option("lung")
    page.locator("#wl-center").fill("not a number")
    page.keyboard.press("Enter")  # refused: the box goes back to what is on screen
    got = canvas_matches(page, path)
    assert got["shown"]["preset"] == "lung" and got["shown"]["c"] != "not a number"
    assert "not a number" in page.locator("#wl-status").inner_text()
    # and is gone once the view changes (it stood through drags and zooms: a new-user trial)
    page.mouse.move(600, 400)
    page.mouse.wheel(0, -120)
    page.wait_for_function("() => !document.getElementById('wl-status').innerText"
                           ".includes('not a number')")
    # numbers as readers type them: "2,500" was applied as 2 (a new-user trial); "12abc" as 12
    for typed, want in (("2,500", 2500), ("2 500", 2500), ("2500,5", 2500.5),
                        ("12abc", 2500.5)):
        page.locator("#wl-width").fill(typed)
        page.keyboard.press("Enter")
        got = canvas_matches(page, path)
        assert got["w"] == want and float(got["shown"]["w"]) == want, (typed, got["shown"])
    # values out of all reason are kept within the film's range, and the box says what is
    # applied (a window of 0, -50 or 1e12 was taken as typed)
    lo, hi = page.evaluate("() => { const [c, w] = rrgViewer.presets['full range'];"
                           " return [c - w / 2, c + w / 2]; }")
    for typed, want in (("0", 1), ("-50", 1), ("1e12", 2 * (hi - lo))):
        page.locator("#wl-width").fill(typed)
        page.keyboard.press("Enter")
        got = canvas_matches(page, path)
        assert got["w"] == round(want, 2) and float(got["shown"]["w"]) == got["w"], got["shown"]
        assert "kept within" in page.locator("#wl-status").inner_text()
    # a level far outside the film's values is kept within them (a new-user trial: 112000
    # and -44000 were taken on a film of values 8000-60000)
    for typed, want in (("-1e12", lo), ("-50000", lo), ("999999", hi)):
        page.locator("#wl-center").fill(typed)
        page.keyboard.press("Enter")
        got = canvas_matches(page, path)
        assert float(got["shown"]["c"]) == got["c"], got["shown"]
        assert abs(got["c"] - want) < 0.01, (typed, got["c"], lo, hi)  # the range's end
        assert "kept within" in page.locator("#wl-status").inner_text()
    # a preset then replaces the typed value, and the note about it goes (it stood: a trial)
    page.locator("#wl-preset").select_option("full range")
    page.wait_for_function("() => !document.getElementById('wl-status').innerText"
                           ".includes('kept within')")
    assert requests.outside() == []


def _hold(page, pattern: str) -> list:
    """Hold the page's requests for pixel files matching `pattern` (the full-depth `-0.u16`,
    the stand-in `-400.u16`) until the test releases them: a slow link, without a timer."""
    held: list = []
    page.route(re.compile(pattern), lambda route: held.append(route))
    return held


def _released(page, held: list, until: str = "rrgViewer.full") -> None:
    for _ in range(500):  # the request leaves once the image's data are in (a round trip)
        if held:
            break
        page.wait_for_timeout(20)
    assert len(held) == 1, held
    assert not page.evaluate("() => rrgViewer.full")  # not yet the full image
    held.pop().continue_()
    page.wait_for_function(f"() => {until}", timeout=90_000)


def test_inputs_made_while_the_full_image_loads_are_kept(browser, films):
    """A fourth new-user trial (medium): Invert, a typed value (Enter) and a preset picked while
    the enlarged view showed the preview and "Loading the full image…" were lost when the
    full-depth pixels arrived, and the toolbar meanwhile showed values that were not on screen.
    A fifth (medium): the preview stood in as an 8-bit copy of the default window, so the lung
    preset showed black lungs, nothing like the full image. Now a stand-in of full bit depth
    (every step-th pixel) comes first and is windowed exactly like the full image. Both pixel
    requests are held: while the stand-in is held, the preview shows the default window and the
    controls say so (disabled); Invert shows at once; with the stand-in in, "lung" equals the
    pipeline on the binned pixels; the typed width and all stay on the full image."""
    app, files = films
    path = files["MONO1"]
    page, requests = open_page(browser, app)
    click_row(page, "MONO1")
    small, held = _hold(page, r".*-400\.u16$"), _hold(page, r".*-0\.u16$")
    page.locator("#film .film-study.current [data-index='0'] img").click()
    first = np.array(page.evaluate(READ_BACK, 9)["values"], dtype=int)
    page.locator("#wl-invert").click()  # at once, on the preview
    got = page.evaluate(READ_BACK, 9)
    assert got["shown"]["inv"] and got["inv"], got["shown"]
    assert np.abs(first + np.array(got["values"]) - 255).max() <= 1
    # the image's data are in, its pixels not: the controls say the preview's window
    page.wait_for_function("() => rrgViewer.meta")
    default = page.evaluate("() => rrgViewer.presets['file default']")
    got = page.evaluate(READ_BACK, 9)
    assert got["shown"]["preset"] == "file default", got["shown"]
    assert float(got["shown"]["c"]) == default[0] and float(got["shown"]["w"]) == default[1]
    assert page.locator("#wl-preset").is_disabled()
    _released(page, small, until="rrgViewer.img && rrgViewer.img.standIn")
    step = page.evaluate("() => JSON.parse(document.querySelector('#wl-data textarea').value)"
                         ".standIn.step")
    page.locator("#wl-preset").select_option("lung", timeout=5_000)
    lung = page.evaluate("() => rrgViewer.presets.lung")
    during = page.evaluate(READ_BACK, 1)
    assert during["shown"]["preset"] == "lung" and during["shown"]["inv"], during["shown"]
    want = 255 - window_level(decoded(path), *lung)
    want = binned(want, -(-max(want.shape) // step))  # the stand-in's blocks (windowed after)
    assert (during["height"], during["width"]) == want.shape
    off = np.abs(np.array(during["values"]) - want.ravel().astype(int))
    print(f"\nstand-in at the lung window: 90th percentile {np.percentile(off, 90):.0f}, "
          f"max {off.max()} grey levels from the pipeline on the binned pixels")
    assert np.percentile(off, 90) <= 3
    page.locator("#wl-width").fill("3000")
    page.keyboard.press("Enter")
    during = page.evaluate(READ_BACK, 2)
    assert during["shown"] == {"c": str(lung[0]).removesuffix(".0"), "w": "3000", "inv": True,
                               "preset": "custom"}, during["shown"]
    assert (during["c"], during["w"], during["inv"]) == (lung[0], 3000, True)
    _released(page, held)
    got = canvas_matches(page, path)
    assert (got["c"], got["w"], got["inv"]) == (lung[0], 3000, True), got["shown"]
    assert got["shown"]["preset"] == "custom" and got["shown"]["w"] == "3000", got["shown"]
    assert page.locator("#wl-status").inner_text() == ""
    # A new-user trial on a slow link (medium): Measure lit up on the stand-in but a drag
    # panned. A film with known spacing, its full image held: the line, in full-image pixels,
    # measures within 1 % on the stand-in and stays when the full image arrives.
    page.keyboard.press("Escape")
    click_row(page, "CAL1")
    wait_text(page, "film-head", "CAL1")
    page.locator("#film .film-study.current [data-index='0'] img").click()
    _released(page, small, until="rrgViewer.img && rrgViewer.img.standIn")
    page.locator("#wl-measure").click()
    step = page.evaluate("() => rrgViewer.meta.standIn.step")
    assert step > 1
    a, b = (300 // step, 400 // step), (1500 // step, 1300 // step)  # stand-in pixels
    got = _measure(page, a, b)
    true_mm = float(np.hypot((b[0] - a[0]) * step * SPACING[1], (b[1] - a[1]) * step * SPACING[0]))
    print(f"on the stand-in (step {step}): {got['mm']:.2f} mm, true {true_mm:.2f} mm")
    assert abs(got["mm"] - true_mm) / true_mm < 0.01, (got, true_mm)
    line = page.evaluate("() => rrgViewer.line")
    _released(page, held)
    assert page.evaluate("() => rrgViewer.line") == line
    assert page.evaluate("() => rrgViewer.length.mm") == got["mm"]
    ends = page.evaluate("() => ['x1', 'y1', 'x2', 'y2'].map((k) => "
                         "Number(document.querySelector('#wl-line').getAttribute(k)))")
    s, tx, ty, k = page.evaluate("() => [rrgViewer.s, rrgViewer.tx, rrgViewer.ty, rrgViewer.a]")
    want = [tx + line[0] * s, ty + line[1] * s * k, tx + line[2] * s, ty + line[3] * s * k]
    assert np.abs(np.array(ends) - want).max() < 1, (ends, want)  # drawn where it was
    assert requests.outside() == []


def close_view(page) -> None:
    """Close the enlarged view (Escape), back to the film panel and the worklist."""
    page.keyboard.press("Escape")
    page.locator("#enlarged").wait_for(state="hidden")


def test_the_canvas_equals_the_servers_display_pipeline(browser, films):
    """A 16-bit PNG, a MONOCHROME1 DICOM and a JPEG 2000 DICOM, at their default window and
    at a typed one, within 1 grey level (one after the other on one page, as a reader opens
    them: a page each cost a page load each)."""
    app, files = films
    page, _ = open_page(browser, app)
    for key in ("BIG1", "MONO1", "JTK1"):
        enlarge(page, key)
        canvas_matches(page, files[key], step=11)
        lo, hi = page.evaluate("() => [rrgViewer.img.offset, rrgViewer.img.offset"
                               " + rrgViewer.img.max * rrgViewer.img.slope]")
        page.locator("#wl-center").fill(str(round(lo + (hi - lo) * 0.4)))
        page.keyboard.press("Enter")
        page.locator("#wl-width").fill(str(round((hi - lo) * 0.3)))
        page.keyboard.press("Enter")
        got = canvas_matches(page, files[key], step=11)
        assert len(set(got["values"])) > 100, key  # a window that shows structure
        close_view(page)


def _mean_and_spread(page) -> tuple[float, float]:
    values = np.array(page.evaluate(READ_BACK, 17)["values"], dtype=float)
    return float(values.mean()), float(values.std())


def test_level_and_window_move_every_file_the_same_way(browser, films):
    """Defect 5: the level ran in opposite directions on a MONOCHROME1 DICOM and a 16-bit PNG.
    A right-drag up brightens and a right-drag right lowers the contrast, on both (one after
    the other on one page)."""
    app, _ = films
    page, _ = open_page(browser, app)
    for key in ("BIG1", "MONO1"):
        _drags_move_the_window(page, key)
        close_view(page)


def _drags_move_the_window(page, key: str) -> None:
    enlarge(page, key)
    page.locator("#wl-preset").select_option("soft tissue")
    mean0, spread0 = _mean_and_spread(page)
    page.mouse.move(600, 400)
    page.mouse.down(button="right")
    page.mouse.move(600, 360, steps=4)
    page.mouse.up(button="right")
    page.wait_for_timeout(100)
    mean1, _ = _mean_and_spread(page)
    assert mean1 > mean0 + 3, (key, mean0, mean1)
    # a drag that moves more than one unit per pixel shows whole values (not "19070.59")
    for box in ("#wl-center", "#wl-width"):
        assert "." not in page.locator(box).input_value(), page.locator(box).input_value()
    page.locator("#wl-preset").select_option("soft tissue")
    page.mouse.down(button="right")
    page.mouse.move(700, 360, steps=4)
    page.mouse.up(button="right")
    page.wait_for_timeout(100)
    _, spread1 = _mean_and_spread(page)
    assert spread1 < spread0 - 1, (key, spread0, spread1)


def test_each_full_image_is_fetched_once_and_a_left_study_stops_its_downloads(browser, films):
    """A new-user trial on a slow link (medium): → ← → within a second fetched the same 10 MB
    file again on each reopen, and leaving a study did not stop its downloads (the next film
    waited 22 s behind the last study's lateral). The full-depth requests are held: four
    openings of BIG2's film ask for its file once; moving to MONO1 aborts the held request, and
    MONO1's film loads."""
    app, files = films
    page, requests = open_page(browser, app)
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    held = _hold(page, r".*-0\.u16$")
    click_row(page, "BIG2")
    wait_text(page, "film-head", "BIG2")
    page.locator("#film .film-study.current [data-index='0'] img").click()
    page.wait_for_function("() => rrgViewer.img && rrgViewer.img.standIn", timeout=90_000)
    page.locator("#wl-stage").click(position={"x": 5, "y": 300})  # the focus on the view
    for key in ("ArrowRight", "ArrowLeft", "ArrowRight"):  # a one-film study: each reopens it
        page.keyboard.press(key)
        page.wait_for_function("() => rrgViewer.img && rrgViewer.img.standIn", timeout=90_000)
    full = [u for u in requests.urls if re.search(r"-0\.u16$", u)]
    assert len(full) == 1 and len(held) == 1, full
    assert not page.evaluate("() => rrgViewer.full")
    page.keyboard.press("Escape")
    click_row(page, "MONO1")
    wait_text(page, "film-head", "MONO1")
    for _ in range(250):  # aborted once the film panel shows the other study
        if full[0] in failed:
            break
        page.wait_for_timeout(20)
    assert [u for u in failed if u.endswith(".u16")] == full, failed  # (not the SSE polls)
    page.unroute(re.compile(r".*-0\.u16$"))
    enlarge(page, "MONO1")  # the new study's film: its full image arrives
    canvas_matches(page, files["MONO1"], step=13)
    assert requests.outside() == []


def test_the_prior_opens_as_its_own_viewport_filling_the_window(browser, films):
    """Defect 3: clicking the prior's film enlarged the current study; defect 4: the enlarged
    view was no larger than the film. The prior is windowed on its own, the view is >= 90 % of
    the window, and the caption says whose film it is from the first moment."""
    app, files = films
    page, requests = open_page(browser, app)
    if "BIG2" not in page.locator("#film-head").inner_text():
        click_row(page, "BIG2")
        wait_text(page, "film-head", "BIG2")
    current = int(page.locator("#film .film-study.current").get_attribute("data-study"))
    page.locator("#toggle-prior").click()
    page.locator("#prior-panel [data-index='0'] img").wait_for()
    prior = int(page.locator("#prior-panel").get_attribute("data-study"))
    assert prior != current
    patient = re.search(r"Patient (\S+)", page.locator("#film-head").inner_text())[1]
    # the prior's head beside the current one names the patient as the current's does
    assert page.locator("#prior-panel .film-head").inner_text().startswith(
        f"Patient {patient} · PRIOR"), page.locator("#prior-panel .film-head").inner_text()
    page.locator("#prior-panel [data-index='0'] img").click()
    caption = page.locator("#wl-caption").inner_text()
    assert "PRIOR" in caption  # at once, before any answer
    assert f"Patient {patient} · PRIOR" in caption, caption  # whose film: the prior's said not
    page.wait_for_function("() => window.rrgViewer.full", timeout=90_000)
    assert page.evaluate("() => rrgViewer.img.study") == prior
    area = page.evaluate("""() => { const r = document.querySelector('#wl-stage')
      .getBoundingClientRect(); return r.width * r.height / (innerWidth * innerHeight); }""")
    assert area >= 0.9, area
    page.locator("#wl-preset").select_option("lung")
    canvas_matches(page, files["BIG1"], step=13)
    # zoom about the cursor: the image point under it stays under it
    before = page.evaluate("() => [rrgViewer.s, rrgViewer.tx, rrgViewer.ty]")
    page.mouse.move(500, 400)
    page.mouse.wheel(0, -300)
    page.wait_for_function(f"() => rrgViewer.s > {before[0]}")
    s, tx = page.evaluate("() => [rrgViewer.s, rrgViewer.tx]")
    assert abs((500 - before[1]) / before[0] - (500 - tx) / s) < 1
    page.keyboard.press("Escape")
    page.locator("#enlarged").wait_for(state="hidden")
    enlarge(page, "BIG2")  # the current study's film: the current study
    assert page.evaluate("() => rrgViewer.img.study") == current
    assert requests.outside() == []


def _measure(page, a: tuple[int, int], b: tuple[int, int]) -> dict:
    """Drag the measuring tool from image pixel a to image pixel b (x, y); what it says."""
    s, tx, ty, k = page.evaluate("() => [rrgViewer.s, rrgViewer.tx, rrgViewer.ty, "
                                 "rrgViewer.a || 1]")  # k: a row's height over a column's width
    at = [(tx + x * s, ty + y * s * k) for x, y in (a, b)]
    page.mouse.move(*at[0])
    page.mouse.down()
    page.mouse.move(*at[1], steps=5)
    page.mouse.up()
    return page.evaluate("() => ({...rrgViewer.length, "
                         "text: document.querySelector('#wl-length').innerText})")


def test_a_distance_is_measured_in_mm_within_one_percent(browser, films):
    app, _ = films
    page, _ = open_page(browser, app, 1920, 1080)
    enlarge(page, "CAL1")
    page.locator("#wl-measure").click()
    # 1,200 columns x 0.15 mm and 900 rows x 0.2 mm: 180 mm each way
    true_mm = float(np.hypot(1200 * SPACING[1], 900 * SPACING[0]))
    got = _measure(page, (300, 400), (1500, 1300))
    print(f"\nmeasured {got['mm']:.2f} mm, true {true_mm:.2f} mm")
    assert abs(got["mm"] - true_mm) / true_mm < 0.01, (got, true_mm)
    assert got["text"].endswith(" mm")  # PixelSpacing: at the patient
    # ImagerPixelSpacing only: the detector's mm, not corrected for magnification; says so
    page.keyboard.press("Escape")
    enlarge(page, "NSQ1")
    page.locator("#wl-measure").click()
    got = _measure(page, (250, 100), (250, 900))  # 800 rows x 0.1 mm
    assert abs(got["mm"] - 80) < 0.5 and got["text"].endswith(" mm at the detector"), got
    # a film without a spacing says so instead of inventing mm
    page.keyboard.press("Escape")
    enlarge(page, "BIG1")
    # every image opens with the pan tool (a new-user trial: Measure stayed on into the next
    # image, so the click meant to start it switched it off and the drag panned)
    assert page.locator("#wl-measure").get_attribute("aria-pressed") == "false"
    assert "drag pan" in page.locator("#wl-caption").inner_text()
    page.locator("#wl-measure").click()
    caption = page.locator("#wl-caption").inner_text()  # says what a drag does now
    assert "drag measures" in caption and "drag pan" not in caption, caption
    page.mouse.click(700, 500)  # a click, no drag: no measurement (it said "0.0 mm")
    assert page.evaluate("() => rrgViewer.length") is None
    assert page.locator("#wl-length").inner_text() == ""
    got = _measure(page, (100, 100), (1100, 100))
    assert got["mm"] is None and "uncalibrated" in got["text"], got
    page.mouse.click(700, 500)  # nor does it undo the last one
    assert page.evaluate("() => rrgViewer.length.px") == got["px"]
    assert abs(got["px"] - 1000) < 10, got


def _disc(png: bytes) -> tuple[int, int]:
    """The bright disc's width and height in a screenshot, in screen pixels."""
    grey = np.asarray(PILImage.open(io.BytesIO(png)).convert("L"))
    ys, xs = np.nonzero(grey > 128)
    return int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


def test_a_film_with_non_square_pixels_is_drawn_at_its_true_aspect(browser, films):
    """A new-user trial (medium): a 50 mm circle on a film with 0.1 x 0.2 mm pixels was drawn a
    tall ellipse in the gallery and in the enlarged view (the mm measurement was right). Both
    now draw it round (width = height within 3 %); zoom about the cursor keeps the point under
    it on both axes, and the canvas still equals the pipeline."""
    app, files = films
    page, requests = open_page(browser, app)
    click_row(page, "NSQ1")
    wait_text(page, "film-head", "NSQ1")
    img = page.locator("#film .film-study.current [data-index='0'] img")
    img.wait_for()
    page.wait_for_function("() => { const i = document.querySelector("
                           "'#film .film-study.current img'); return i.complete && "
                           "i.naturalWidth > 0; }")
    w, h = _disc(img.screenshot())
    print(f"\ngallery: disc {w} x {h} px", end="")
    assert abs(w / h - 1) < 0.03, (w, h)
    img.click()
    page.wait_for_function("() => window.rrgViewer.full", timeout=90_000)
    box = page.evaluate("""() => { const v = rrgViewer, c = document.querySelector('#wl-canvas');
      const r = document.querySelector('#wl-stage').getBoundingClientRect();
      return {x: r.left + v.tx, y: r.top + v.ty, width: c.width * v.s,
              height: c.height * v.s * v.a}; }""")
    w, h = _disc(page.screenshot(clip=box))
    print(f"; enlarged: disc {w} x {h} px")
    assert abs(w / h - 1) < 0.03, (w, h)
    s, tx, ty, k = page.evaluate("() => [rrgViewer.s, rrgViewer.tx, rrgViewer.ty, rrgViewer.a]")
    assert k == 0.5
    page.mouse.move(600, 400)
    page.mouse.wheel(0, -300)
    page.wait_for_function(f"() => rrgViewer.s > {s}")
    s2, tx2, ty2 = page.evaluate("() => [rrgViewer.s, rrgViewer.tx, rrgViewer.ty]")
    stage_top = page.evaluate("() => document.querySelector('#wl-stage')"
                              ".getBoundingClientRect().top")
    assert abs((600 - tx) / s - (600 - tx2) / s2) < 1
    assert abs((400 - stage_top - ty) / (s * k) - (400 - stage_top - ty2) / (s2 * k)) < 1
    canvas_matches(page, files["NSQ1"], step=5)
    assert requests.outside() == []


FILM_BOX = """() => { const v = window.rrgViewer, c = document.querySelector('#wl-canvas');
  const top = document.querySelector('#enlarged-tools').offsetHeight;
  const cap = document.querySelector('#wl-caption').offsetHeight;
  return {s: v.s, tx: v.tx, ty: v.ty, fitted: v.fitted, refits: v.refits, w: c.width * v.s,
          h: c.height * v.s, vw: innerWidth, vh: innerHeight, top, cap,
          fit: Math.min(innerWidth / c.width, (innerHeight - top - cap) / c.height)}; }"""


def _centre_point(box: dict) -> tuple[float, float]:
    """The image pixel at the centre of the view (below the toolbar, above the caption)."""
    cy = box["top"] + (box["vh"] - box["top"] - box["cap"]) / 2
    return (box["vw"] / 2 - box["tx"]) / box["s"], (cy - box["ty"]) / box["s"]


def _resize(page, width: int, height: int) -> dict:
    """Resize the window; the film as it is two animation frames later."""
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_function(f"() => innerWidth === {width} && innerHeight === {height}")
    page.evaluate("() => new Promise((done) => "
                  "requestAnimationFrame(() => requestAnimationFrame(done)))")
    return page.evaluate(FILM_BOX)


def test_the_enlarged_view_refits_when_the_window_is_resized(browser, films):
    """#21 M1: at 1920 -> 1366 the fitted film kept its size (the lower lungs off-screen), and
    growing left it small in a corner. A film at "fit" is fitted again; a zoomed one keeps its
    zoom and the point at the centre of the view; window/level, invert and a measurement stay;
    a burst of resize events costs one refit."""
    app, files = films
    page, _ = open_page(browser, app, 1920, 1080)
    enlarge(page, "BIG2")
    box = page.evaluate(FILM_BOX)
    assert abs(box["s"] - box["fit"]) < 1e-9, box
    for width, height in ((1366, 768), (1920, 1080)):
        box = _resize(page, width, height)
        assert abs(box["s"] - box["fit"]) < 1e-9, box  # fitted to the new window
        # under neither the toolbar nor the caption (it covered the film's last 19 px)
        assert box["cap"] >= 15, box
        assert box["top"] - 1 <= box["ty"] and box["ty"] + box["h"] <= height - box["cap"] + 1, box
        assert abs(box["tx"] + box["w"] / 2 - width / 2) < 1, box  # centred
    # the reader's window, invert and a measurement survive; a zoom keeps the centre point
    page.locator("#wl-preset").select_option("lung")
    page.locator("#wl-invert").click()
    page.locator("#wl-measure").click()
    _measure(page, (500, 600), (1400, 1900))
    line = page.evaluate("() => [...rrgViewer.line]")
    page.mouse.move(700, 500)
    page.mouse.wheel(0, -300)
    page.wait_for_function("() => !rrgViewer.fitted")
    before = page.evaluate(FILM_BOX)
    box = _resize(page, 1366, 768)
    assert box["s"] == before["s"] and not box["fitted"], (before, box)
    assert np.allclose(_centre_point(box), _centre_point(before), atol=0.5), (before, box)
    got = canvas_matches(page, files["BIG2"], step=13)
    assert got["shown"]["preset"] == "lung" and got["inv"], got["shown"]
    assert page.evaluate("() => rrgViewer.line") == line
    drawn = page.evaluate("() => ['x1', 'y1'].map((k) => "
                          "Number(document.querySelector('#wl-line').getAttribute(k)))")
    assert np.allclose(drawn, [box["tx"] + line[0] * box["s"], box["ty"] + line[1] * box["s"]])
    # panned to the edge, then shrunk: a third of the view stays on the film (a strip of
    # 64 px, kept before, was the film's black border: a new-user trial saw an empty screen)
    page.locator("#wl-measure").click()
    page.mouse.dblclick(600, 400)
    _resize(page, 1920, 1080)
    page.mouse.move(400, 500)
    page.mouse.down()
    page.mouse.move(1700, 500, steps=3)
    page.mouse.up()
    page.mouse.move(1700, 500)
    page.mouse.down()
    page.mouse.move(1900, 300, steps=3)  # on, out of the view
    page.mouse.up()
    box = page.evaluate(FILM_BOX)
    assert abs(box["tx"] - (1920 - 640)) < 1 and box["ty"] < box["top"], box
    box = _resize(page, 1366, 768)
    assert box["tx"] <= 1366 - 1366 / 3 + 1, box
    # wheeled far out: a quarter of the fitted size at the least (a trial's film was 38 px)
    page.mouse.dblclick(600, 400)
    fitted = page.evaluate(FILM_BOX)["s"]
    page.mouse.move(600, 400)
    for _ in range(20):
        page.mouse.wheel(0, 300)
    page.wait_for_function(f"() => rrgViewer.s < {fitted / 3}")
    assert page.evaluate(FILM_BOX)["s"] >= fitted / 4 - 1e-9
    # a burst of resize events: one refit in the next frame
    got = page.evaluate("""() => new Promise((done) => {
      const n = rrgViewer.refits;
      for (let i = 0; i < 30; i++) window.dispatchEvent(new Event('resize'));
      requestAnimationFrame(() => requestAnimationFrame(() => done(rrgViewer.refits - n)));
    })""")
    assert got == 1, got


def test_each_image_reopens_with_the_readers_window(browser, films):
    """#21 M2 (and L1): every opening reset window/level to the file default, so flipping
    current <-> prior at a lung window meant retyping it, and ← → on a one-film study threw
    it away. Each image remembers its window, preset and invert for the page; a new study's
    images open at their default."""
    app, files = films
    page, requests = open_page(browser, app)
    enlarge(page, "BIG2")
    page.locator("#wl-preset").select_option("lung")
    page.locator("#wl-invert").click()
    page.keyboard.press("Escape")
    page.locator("#toggle-prior").click()
    prior = page.locator("#prior-panel [data-index='0'] img")
    prior.click()
    page.wait_for_function("() => rrgViewer.full", timeout=90_000)
    got = canvas_matches(page, files["BIG1"], step=13)  # another image: its own default
    assert got["shown"]["preset"] == "file default" and not got["inv"], got["shown"]
    page.locator("#wl-preset").select_option("bone")
    page.locator("#wl-stage").click(position={"x": 5, "y": 300})  # the focus off the menu
    page.keyboard.press("p")  # the current study's film, without leaving the view
    page.wait_for_function("() => rrgViewer.full && rrgPick() === 'current:0'", timeout=90_000)
    got = canvas_matches(page, files["BIG2"], step=13)
    assert got["shown"]["preset"] == "lung" and got["shown"]["inv"], got["shown"]
    # ← → on a one-film study reopens it: a typed level stays (it was discarded)
    page.locator("#wl-center").fill("20000")
    page.keyboard.press("Enter")
    page.locator("#wl-stage").click(position={"x": 5, "y": 300})  # the focus off the box
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => rrgViewer.full", timeout=90_000)
    got = canvas_matches(page, files["BIG2"], step=13)
    assert got["c"] == 20000 and got["shown"]["c"] == "20000", got["shown"]
    assert got["shown"]["preset"] == "custom" and got["shown"]["inv"], got["shown"]
    page.keyboard.press("Escape")
    prior.click()
    page.wait_for_function("() => rrgViewer.full", timeout=90_000)
    got = canvas_matches(page, files["BIG1"], step=13)
    assert got["shown"]["preset"] == "bone" and not got["inv"], got["shown"]
    page.keyboard.press("Escape")
    enlarge(page, "MONO1")  # a new study: its default
    got = canvas_matches(page, files["MONO1"], step=13)
    assert got["shown"]["preset"] == "file default" and not got["inv"], got["shown"]
    # a level typed and the view closed with Esc from the box: applied, as leaving the box
    # applies it (Esc threw it away: a new-user trial), and the film reopens with it
    page.locator("#wl-center").fill("12345")
    page.keyboard.press("Escape")
    page.locator("#enlarged").wait_for(state="hidden")
    enlarge(page, "MONO1")
    assert page.evaluate(READ_BACK, 500)["shown"]["c"] == "12345"
    assert requests.outside() == []


def test_p_twice_comes_back_to_the_film_left(browser, films):
    """A new-user trial (low): P pressed twice from a study's lateral came back to its
    frontal. P goes to the image last opened on the other study, else the same number."""
    app, _ = films
    page, _ = open_page(browser, app)
    click_row(page, "TWO2")
    wait_text(page, "film-head", "TWO2")
    page.locator("#toggle-prior").click()
    page.locator("#prior-panel [data-index='0'] img").wait_for()
    page.locator("#film .film-study.current [data-index='1'] img").click()
    page.wait_for_function("() => rrgViewer.full && rrgPick() === 'current:1'", timeout=90_000)
    bars = page.evaluate(FILM_BOX)
    page.locator("#wl-preset").select_option("lung")
    page.locator("#wl-invert").click()
    page.locator("#wl-stage").click(position={"x": 5, "y": 300})  # the focus on the view
    page.mouse.move(600, 400)
    for _ in range(3):  # zoomed in on the lateral
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(50)
    page.keyboard.press("p")
    page.wait_for_function("() => rrgViewer.full && rrgPick() === 'prior:0'", timeout=90_000)
    # the prior, not opened before, at the same preset on its own histogram (it opened at
    # its file default beside a lung window: a new-user trial)
    shown = page.evaluate(READ_BACK, 500)["shown"]
    lung = page.evaluate("() => rrgViewer.presets.lung")
    assert shown["preset"] == "lung" and [float(shown["c"]), float(shown["w"])] == lung, shown
    assert shown["inv"]  # inverted as the film it came from (it opened plain: a new-user trial)
    # the prior has no lateral (trial 8, low: its PA opened at the lateral's zoom): said, at fit
    assert "has no lateral film" in page.locator("#wl-status").inner_text()
    assert page.locator("#next-image").is_disabled()  # (its one image: nowhere to go)
    assert abs(page.evaluate(VIEW_NOW)["z"] - 1) < 0.01
    # the film is fitted between toolbar and caption of the same heights on both sides of P,
    # whatever they say (at 1366 px the note wrapped the toolbar and the prior's caption took
    # two lines: the same film drawn 27 px lower and smaller on one side, a new-user trial)
    box = page.evaluate(FILM_BOX)
    assert (box["top"], box["cap"]) == (bars["top"], bars["cap"]), (bars, box)
    page.keyboard.press("p")
    page.wait_for_function("() => rrgViewer.full", timeout=90_000)
    assert page.evaluate("() => rrgPick()") == "current:1"
    assert "Image 2 of 2" in page.locator("#wl-caption").inner_text()
    assert page.locator("#next-image").is_enabled()  # (two images)


VIEW_NOW = """() => {
  const v = window.rrgViewer, c = document.querySelector('#wl-canvas');
  const r = document.querySelector('#wl-stage').getBoundingClientRect();
  const top = document.querySelector('#enlarged-tools').offsetHeight;
  const h = r.height - top - document.querySelector('#wl-caption').offsetHeight;
  const fit = Math.min(r.width / c.width, h / (c.height * v.a));
  return {z: v.s / fit, fx: (r.width / 2 - v.tx) / (c.width * v.s),
          fy: (top + h / 2 - v.ty) / (c.height * v.s * v.a)};
}"""


def test_p_keeps_the_part_of_the_chest_in_view_the_tool_and_each_films_line(browser, films):
    """A seventh new-user trial (medium): P opened the other study's film at fit, so comparing
    one zone meant zooming and panning again on every flip. P now shows the same part of the
    film (fractions of its width and height at the view's centre) at the same zoom over fit,
    as linked PACS viewports do; each film keeps its own window. (Lows of the same trial:)
    Measure stays on through P, a film's line is there again on coming back, P without the
    prior beside says how to show it, and a picked preset is not renamed to another preset
    of the same values."""
    app, _ = films
    page, requests = open_page(browser, app, 1920, 1080)
    click_row(page, "BIG2")
    wait_text(page, "film-head", "BIG2")
    page.locator("#toggle-prior").click()
    page.locator("#prior-panel [data-index='0'] img").wait_for()
    enlarge(page, "BIG2")
    for _ in range(3):  # zoomed in on the upper left zone
        page.mouse.move(700, 400)
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(100)
    page.mouse.move(900, 600)
    page.mouse.down()
    page.mouse.move(960, 640, steps=4)  # and panned a little
    page.mouse.up()
    here = page.evaluate(VIEW_NOW)
    assert here["z"] > 1.5, here
    page.locator("#wl-measure").click()
    page.mouse.move(800, 500)
    page.mouse.down()
    page.mouse.move(1000, 500, steps=5)
    page.mouse.up()
    line = page.evaluate("() => rrgViewer.length.px")
    assert page.locator("#wl-which").inner_text().startswith("CURRENT")
    page.keyboard.press("p")
    page.wait_for_function("() => rrgViewer.full && rrgPick() === 'prior:0'", timeout=90_000)
    there = page.evaluate(VIEW_NOW)
    # the toolbar says whose film, with its date (new-user trial 17: only the grey caption did)
    which = page.locator("#wl-which").inner_text()
    assert which.startswith("PRIOR · ") and re.search(r"\d{4}-\d\d-\d\d", which), which
    for k in ("z", "fx", "fy"):
        assert abs(there[k] - here[k]) < 0.01 * max(1, abs(here[k])), (k, here, there)
    assert page.locator("#wl-measure").get_attribute("aria-pressed") == "true"
    assert "drag measures" in page.locator("#wl-caption").inner_text()
    assert page.evaluate("() => rrgViewer.length") is None  # the prior has no line of its own
    page.keyboard.press("p")
    page.wait_for_function("() => rrgViewer.full && rrgPick() === 'current:0'", timeout=90_000)
    back = page.evaluate(VIEW_NOW)
    assert all(abs(back[k] - here[k]) < 0.01 * max(1, abs(here[k])) for k in here), (here, back)
    assert page.evaluate("() => rrgViewer.length.px") == line  # the film's line is back
    drawn = page.evaluate("""() => { const l = document.querySelector('#wl-line');
      return [l.style.display, +l.getAttribute('x2') - +l.getAttribute('x1')]; }""")
    assert drawn[0] != "none" and abs(drawn[1] - 200) < 2, drawn  # where it was drawn
    # ← → is another projection: at fit (a one-film study reopens its film)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => rrgViewer.full", timeout=90_000)
    assert abs(page.evaluate(VIEW_NOW)["z"] - 1) < 0.01
    # a picked preset keeps its name where another has the same values
    presets = page.evaluate("() => rrgViewer.presets")
    twins = [(a, b) for a in presets for b in presets
             if a < b and presets[a] == presets[b]]
    for a, b in twins:
        for name in (a, b):
            page.locator("#wl-preset").select_option(name)
            assert page.locator("#wl-preset").input_value() == name, (name, presets)
    page.keyboard.press("Escape")
    page.locator("#toggle-prior").click()  # the prior off: P says how to show it
    page.locator("#prior-panel [data-index='0'] img").wait_for(state="detached")
    enlarge(page, "BIG2")
    assert "no prior beside (Alt+B" in page.locator("#wl-caption").inner_text()
    page.keyboard.press("p")
    wait_text(page, "wl-status", "Alt+B shows it")
    assert page.evaluate("() => rrgPick()") == "current:0"
    # a patient with no prior is not told to show one (a thirteenth new-user trial)
    page.keyboard.press("Escape")
    enlarge(page, "MONO1")
    assert "no prior study" in page.locator("#wl-caption").inner_text()
    page.keyboard.press("p")
    wait_text(page, "wl-status", "No prior study of this patient")
    assert requests.outside() == []


def test_an_image_picked_while_the_last_one_loads_still_opens(browser, films):
    """A second new-user trial (medium): → (or another film) pressed before the first film's
    full image had arrived left the view on "Loading the full image…" for good, with no window
    to set: the page's request for the second image was dropped while the first was under way.
    Here the prior is picked right after the current film, before its answer can be in."""
    app, files = films
    page, _ = open_page(browser, app)
    click_row(page, "BIG2")
    page.locator("#toggle-prior").click()
    prior = page.locator("#prior-panel [data-index='0'] img")
    prior.wait_for()
    page.locator("#film .film-study.current [data-index='0'] img").click()
    page.keyboard.press("Escape")  # at once: the current film's answer is still on its way
    prior.click()
    page.wait_for_function("() => rrgViewer.full && rrgPick() === 'prior:0'", timeout=60_000)
    got = canvas_matches(page, files["BIG1"], step=13)
    assert got["shown"]["preset"] == "file default", got["shown"]
    assert page.locator("#wl-status").inner_text() == ""


def test_the_view_keeps_the_report_shortcuts_and_measures_only_the_film(browser, films):
    """A third new-user trial: Alt+R and Alt+A in the enlarged view rated and accepted the
    study unseen (high), Alt+F typed into the hidden findings, and a measurement dragged past
    the window's edge measured beyond the film (medium). The view now refuses the report's
    shortcuts and says why, and a measurement's ends stay on the film."""
    app, _ = films
    page, _ = open_page(browser, app, 1920, 1080)
    click_row(page, "CAL1")
    findings = page.locator("#edit-findings textarea").input_value()
    enlarge(page, "CAL1")
    page.locator("#wl-stage").click(position={"x": 5, "y": 300})
    for key in ("Alt+r", "Alt+a", "Alt+d", "Alt+f"):
        page.keyboard.press(key)
    page.keyboard.type("ZZZ")
    assert "Close the enlarged view first" in page.locator("#wl-status").inner_text()
    page.locator("#wl-measure").click()
    width = page.evaluate("() => rrgViewer.img.width")
    s, tx = page.evaluate("() => [rrgViewer.s, rrgViewer.tx]")
    page.mouse.move(tx + width / 2 * s, 500)
    page.mouse.down()
    page.mouse.move(1920 + 300, 500, steps=5)  # past the window's right edge
    page.mouse.up()
    line = page.evaluate("() => rrgViewer.line")
    assert line[2] == width, line  # at the film's edge, not beyond
    got = page.evaluate("() => rrgViewer.length")
    assert abs(got["mm"] - width / 2 * SPACING[1]) < 0.5, (got, width)
    page.keyboard.press("Escape")
    page.locator("#enlarged").wait_for(state="hidden")
    # nothing reached the editor or the rating under the view
    assert page.locator("#edit-findings textarea").input_value() == findings
    # (the line itself may show Gradio's timer of an event on its way under load: "0.0s")
    assert "rated" not in page.locator("#rate-status").inner_text().lower()
    assert app.query("SELECT count(*) FROM rating r JOIN study s ON s.id = r.study_id "
                     "WHERE s.study_key = 'CAL1'") == [(0,)]
    assert "accept" not in page.locator("#save-status").inner_text().lower()


WATCH_HEAD = """() => {
  window.rrgStale = []; window.rrgHeads = 0;
  const head = () => document.querySelector('#film-head');
  new MutationObserver(() => {
    const h = head(); if (!h || !h.innerText.includes('MONO1')) return;
    window.rrgHeads += 1;
    for (const img of document.querySelectorAll('#film .current .film-images img')) {
      const drawn = getComputedStyle(img).visibility !== 'hidden';
      if (drawn && !(img.complete && img.naturalWidth)) window.rrgStale.push(img.src);
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true,
                             attributes: true});
}"""


def test_the_next_patients_head_never_sits_over_the_last_patients_film(browser, films):
    """An eighth new-user trial (high, on a 1 MB/s link): after a worklist click the new
    patient's header sat over the previous patient's film for 0.3-0.6 s. Gradio updates the
    film panel in place, so the <img> keeps drawing its old picture until the new src has
    loaded. The new study's preview is held here: until it arrives its film is hidden (black),
    never the last patient's picture."""
    app, _ = films
    page, _ = open_page(browser, app)
    click_row(page, "BIG2")
    wait_text(page, "film-head", "BIG2")
    page.wait_for_function("() => [...document.querySelectorAll('#film .film-images img')]"
                           ".every((i) => i.complete && i.naturalWidth)")
    held = _hold(page, r"/previews/")
    page.evaluate(WATCH_HEAD)
    click_row(page, "MONO1")
    wait_text(page, "film-head", "MONO1")
    for _ in range(500):  # the new study's preview asked for, and held
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the next study's preview was never asked for"
    page.wait_for_timeout(300)  # frames drawn while it is held
    assert page.evaluate("() => window.rrgHeads") > 0
    assert page.evaluate("() => window.rrgStale") == []
    hidden = page.evaluate("() => [...document.querySelectorAll('#film .current .film-images"
                           " img')].map((i) => getComputedStyle(i).visibility)")
    assert hidden and set(hidden) == {"hidden"}, hidden
    while held:  # released (later ones are let through as they come)
        held.pop().continue_()
    page.route(re.compile(r"/previews/"), lambda route: route.continue_())
    page.wait_for_function("() => [...document.querySelectorAll('#film .current .film-images"
                           " img')].every((i) => getComputedStyle(i).visibility !== 'hidden'"
                           " && i.complete && i.naturalWidth)", timeout=90_000)


def test_a_film_shown_smaller_than_half_is_drawn_from_averaged_pixels(browser, films):
    """An eighth new-user trial (medium): at fit (0.18x) the enlarged view dropped the
    3-pixel arms of a marker cross that the gallery preview kept: the browser scaled the
    full-resolution canvas straight down (bilinear: 4 of every 30 pixels read). Shown at
    less than half size, the film is drawn at once from a copy halved k times (2 x 2 means),
    so every pixel counts; the copy equals the box mean of the full canvas (numpy). An
    eleventh trial (medium): between halvings (0.59x, 0.86x) the bilinear step still made
    false bars of 1-pixel line pairs; once the view is still, the film on screen is resampled
    to its exact size, each screen pixel the area-weighted mean of the pixels it covers."""
    app, _ = films
    page, _ = open_page(browser, app)
    enlarge(page, "BIG2")
    s_shown = page.evaluate("() => window.rrgViewer.s")
    full, mip = canvas_grey(page, "#wl-canvas"), canvas_grey(page, "#wl-mip")
    assert s_shown < 0.5, s_shown
    h, w = full.shape
    mh, mw = mip.shape
    k = round(np.log2(w / mw))
    f = 2 ** k
    assert k >= 1 and s_shown * f >= 0.5 and round(h / mh) == f, (k, s_shown, h, mh)
    mean = full[: h // f * f, : w // f * f].reshape(h // f, f, w // f, f).mean(axis=(1, 3))
    drawn = mip[: h // f, : w // f]
    err = np.abs(drawn - mean)
    print(f"\nshown at {s_shown:.3f}x from a copy halved {k} times: |copy - box mean| "
          f"p99 {np.percentile(err, 99):.2f}, max {err.max():.2f} grey levels")
    assert np.percentile(err, 99) <= 1.0 and err.max() <= 2.0
    fine_equals_area_means(page, full, "at fit")
    # between half and full size: resampled too, once still
    page.mouse.move(600, 400)
    for _ in range(10):
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(30)
        if page.evaluate("() => rrgViewer.s >= 0.5"):
            break
    page.wait_for_function("() => rrgViewer.s >= 0.5 && rrgViewer.s < 1")
    fine_equals_area_means(page, full, "between half and full size")
    # at full size and above the full-resolution canvas itself is shown
    for _ in range(10):
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(30)
    page.wait_for_function("() => rrgViewer.s >= 1")
    page.wait_for_timeout(300)
    assert page.evaluate("() => ['#wl-mip', '#wl-fine'].map((q) => getComputedStyle("
                         "document.querySelector(q)).display).concat(getComputedStyle("
                         "document.querySelector('#wl-canvas')).visibility)"
                         ) == ["none", "none", "visible"]


def area_weights(n: int, m: int) -> np.ndarray:
    """The m x n matrix taking n pixels to m: row t holds the share of each pixel inside
    target t's footprint [t n/m, (t+1) n/m), over the footprint's length."""
    edges = np.arange(m + 1) * (n / m)
    lo, hi = edges[:-1, None], edges[1:, None]
    px = np.arange(n)[None, :]
    overlap = np.clip(np.minimum(hi, px + 1) - np.maximum(lo, px), 0, None)
    return overlap / (n / m)


def fine_equals_area_means(page, full: np.ndarray, where: str) -> None:
    page.wait_for_function("() => getComputedStyle(document.querySelector('#wl-fine')).display"
                           " === 'block'")
    got = page.evaluate("""() => ({s: rrgViewer.s, ms: rrgViewer.fineMs,
      mip: getComputedStyle(document.querySelector('#wl-mip')).display})""")
    fine = canvas_grey(page, "#wl-fine")
    got["h"], got["w"] = fine.shape
    h, w = full.shape
    assert got["w"] == max(1, round(w * got["s"])) and got["mip"] == "none", got["w"]
    expected = area_weights(h, got["h"]) @ full @ area_weights(w, got["w"]).T
    err = np.abs(fine - expected)
    print(f"{where}, {got['s']:.3f}x: resampled to {got['w']} x {got['h']} in {got['ms']:.0f} ms, "
          f"|shown - area "
          f"mean| p99 {np.percentile(err, 99):.2f}, max {err.max():.2f} grey levels")
    assert np.percentile(err, 99) <= 1.0 and err.max() <= 2.0


def test_pixel_files_travel_gzipped_and_nothing_else_is_served_that_way(browser, films):
    """An eighth new-user trial (medium, on a 1 MB/s link): full images took 10-24 s; they
    went as raw 16-bit values. Each pixel file is stored once packed beside it (differences,
    high bytes then low bytes, gzipped), and a browser that accepts gzip gets that copy, which
    the page unpacks: the canvas still equals the server's pipeline, and the values equal the
    plain file's. A `../` out of the pixel folder is not answered from it."""
    app, files = films
    page, _ = open_page(browser, app)
    sizes: dict[str, tuple[str | None, int]] = {}

    def seen(response) -> None:
        if response.url.endswith(".u16"):
            body = response.body()
            sizes[response.url] = (response.headers.get("content-encoding"), len(body))

    page.on("response", seen)
    enlarge(page, "MONO1")
    canvas_matches(page, files["MONO1"], step=13)
    page.remove_listener("response", seen)  # a prefetch may still land while we look
    arrived = dict(sizes)
    assert arrived and all(enc == "gzip" for enc, _ in arrived.values()), arrived
    for url, (_, decoded) in arrived.items():
        sent = page.evaluate("(u) => performance.getEntriesByName(u)[0].encodedBodySize", url)
        print(f"\n{url.rsplit('-', 1)[1]}: {decoded} bytes sent as {sent} ({sent / decoded:.2f})")
    full = next(url for url in arrived if url.endswith("-0.u16"))
    plain = page.request.get(full, headers={"Accept-Encoding": "identity"})
    packed = page.request.get(full, headers={"Accept-Encoding": "gzip"})
    assert plain.status == packed.status == 200
    assert packed.headers.get("x-pixel-coding") == "delta-planes"
    planes = np.frombuffer(packed.body(), dtype=np.uint8)  # (gzip undone by the client)
    n = planes.size // 2
    delta = (planes[:n].astype(np.uint16) << 8) | planes[n:]
    values = np.cumsum(delta, dtype=np.uint64) % 65536  # the page's unpacking, in numpy
    assert np.array_equal(values.astype(np.uint16), np.frombuffer(plain.body(), np.uint16))
    folder = full.split("/file=", 1)[1].rsplit("/", 2)[0]  # .../previews
    outside = page.request.get(full.split("/file=", 1)[0] + "/file=" + folder
                               + "/../app.sqlite.u16", headers={"Accept-Encoding": "gzip"})
    assert outside.status != 200 or "gzip" not in outside.headers.get("content-encoding", "")


# Clicks the open study's first image the moment it is drawn, before the page's next 200 ms
# poll has read which study the server drew (a reader quick on a freshly loaded page)
CLICK_AS_DRAWN = """(() => {
  const watch = new MutationObserver(() => {
    const img = document.querySelector("#film .film-study.current [data-index='0'] img");
    if (!img) return;
    watch.disconnect();
    img.click();
    window.rrgClickedAsDrawn = Date.now();
  });
  watch.observe(document, {childList: true, subtree: true});
})();"""


def test_a_film_enlarged_as_the_page_first_draws_it_stays_open(browser, films):
    """A loaded run: the first study's image, clicked as soon as it was on screen, opened the
    enlarged view, and the page closed it again a moment later as it learned which study it
    showed (the view is closed when another study is drawn; the same study is not another)."""
    app, _ = films
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    page.add_init_script(CLICK_AS_DRAWN)
    page.goto(app.url)
    page.wait_for_function("() => window.rrgClickedAsDrawn", timeout=90_000)
    page.wait_for_timeout(1000)  # five of the page's polls
    state = page.evaluate(VIEW_STATE)
    assert state["open"] and state["pick"] == "current:0", state
    page.wait_for_function("() => window.rrgViewer.full", timeout=90_000)
    # another study drawn still closes it (Next, from the view: the worklist is under it)
    head = page.locator("#film-head").inner_text()
    page.keyboard.press("Alt+n")
    page.wait_for_function("(was) => document.querySelector('#film-head').innerText !== was",
                           arg=head)
    page.wait_for_function("() => !document.querySelector('[data-open]')")
