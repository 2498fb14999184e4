// rrg-review enlarged view: window/level, invert, zoom and pan in the browser, on a canvas.
// The server sends each image once at full bit depth (uint16 values with an offset and slope:
// the display pipeline's modality-LUT output) from its own file route behind the login; every
// window/level change after that is a lookup table over the typed array here, so a drag makes
// no request (a round trip per change took 1.3-3.7 s in a new-user trial). The curve is the
// server's (studies/pixels.py window_level, DICOM PS3.3 C.11.2.1.2), MONOCHROME1 flipped.
// Hand-written rather than Cornerstone3D: see README ("The enlarged view").
(() => {
  const V = window.rrgViewer = {pick: null, img: null, full: false, meta: null, limits: null, c: 0, w: 1,
                                inv: false, a: 1,
                                s: 1, tx: 0, ty: 0, frames: 0, dragMs: 0, requested: null, presets: {},
                                measuring: false, line: null, length: null, fitted: false,
                                refits: 0};
  const $ = (sel) => document.querySelector(sel);
  // whether the page offers a prior of this study (Show prior is enabled only then): a patient
  // with none was told "no prior beside (Alt+B shows it)" as if one existed (a new-user trial)
  const priorOffered = () => { const b = $('#toggle-prior'); return !!b && !b.disabled; };
  // what a drag does says which tool is on (it said "drag pan" while Measure was on)
  const hints = (measuring) => 'right-drag window/level · wheel zoom · ' +
    (measuring ? 'drag measures' : 'drag pan') + ' · double-click fits · ' +
    '← → other images · ' +
    (figures('prior').length ? 'P current ⇄ prior'
      : priorOffered() ? 'no prior beside (Alt+B shows it)' : 'no prior study') +
    ' · Esc closes';
  const cache = new Map();  // url -> Uint16Array (the last few images: ← → come back to them)
  const pending = new Map();  // url -> {promise, controller, study} of a file on its way
  // image id -> the reader's {c, w, inv} for each image opened on this page, so that flipping
  // between current and prior (or ← → on one film) keeps the window set (a new-user trial
  // retyped a lung window on every flip). In memory only: a reload starts from the defaults.
  const remembered = new Map();
  const REMEMBER = 1000;
  // image id -> the line measured on it (full-image pixels): a measurement stays with its
  // film through ← → and P and is there on coming back (it was dropped: a new-user trial)
  const lines = new Map();
  let root = null, stage, canvas, ctx, imageData = null, out32 = null, lut = null;
  let fast, fastCtx, fastData = null, fast32 = null;
  let mipEl, gen = 0, mipGen = -1, mipK = '';  // the film drawn smaller (see showView)
  let fineEl, fineTimer = 0, fineKey = '';  // ... and resampled to its size on screen
  const scratch = [];
  let drag = null, queued = false, lastData = null;
  let view = null, refitQueued = false;  // the view the film was last placed in: {w, h, top}
  // the film's preview (its 8-bit grey values, as drawn at the file's default window) until
  // the stand-in's pixels arrive, and whether the reader ticked Invert meanwhile
  let preview = null, invertTouched = false;
  let carryPreset = null;  // the preset P takes to a film not opened yet (`flip`)
  let carryInvert = null;  // and the invert
  let captionHead = '';  // whose film this is: patient, study, date, image n of N
  const left = {};  // 'current' / 'prior' -> {study, at}: the image last opened there (P)
  const fmt = (x) => String(Math.round(x * 100) / 100);
  const el = (id) => root.querySelector('#' + id);

  // -- drawing ------------------------------------------------------------------------------
  const fillLut = (im) => {
    const w = Math.max(V.w, 1), lo = V.c - 0.5, den = w - 1;
    for (let v = 0; v <= im.max; v++) {
      const raw = im.offset + im.slope * v;
      let x = w <= 1 ? (raw > lo ? 1 : 0) : (raw - lo) / den + 0.5;
      x = x < 0 ? 0 : (x > 1 ? 1 : x);
      if (im.inverted) x = 1 - x;
      let g = Math.round(x * 255);
      if (V.inv) g = 255 - g;
      lut[v] = 0xff000000 | (g << 16) | (g << 8) | g;
    }
  };
  const render = () => {  // every pixel of the image, at full resolution
    queued = false;
    const im = V.img; if (!im) { renderPlain(); return; }
    fillLut(im);
    const src = im.data, dst = out32;
    for (let i = 0, n = src.length; i < n; i++) dst[i] = lut[src[i]];
    ctx.putImageData(imageData, 0, 0);
    gen += 1;
    fast.style.display = 'none';
    showView();
    V.frames += 1;
    sync();
  };
  // While a drag windows an image shown smaller than it is, only every step-th pixel is drawn
  // (as many as the screen shows, on a second canvas over the first): a 2,000 x 2,500 film at
  // about 0.3x is 9x less work per frame. The full image is drawn when the drag ends.
  const renderFast = () => {
    queued = false;
    const im = V.img; if (!im || !drag) return;  // a drag that has ended was drawn in full
    const t0 = performance.now();
    const step = Math.max(1, Math.floor(1 / V.s));
    if (step === 1) { render(); return; }
    const w = Math.ceil(im.width / step), h = Math.ceil(im.height / step);
    if (!fastData || fastData.width !== w || fastData.height !== h) {
      fast.width = w; fast.height = h;
      fastData = fastCtx.createImageData(w, h);
      fast32 = new Uint32Array(fastData.data.buffer);
    }
    fillLut(im);
    const src = im.data, dst = fast32, W = im.width;
    let j = 0;
    for (let y = 0; y < im.height; y += step) {
      for (let i = y * W, end = i + W; i < end; i += step) dst[j++] = lut[src[i]];
    }
    fastCtx.putImageData(fastData, 0, 0);
    fast.style.transform = `translate(${V.tx}px, ${V.ty}px) scale(${V.s * step}, ${sy() * step})`;
    fast.style.display = 'block';
    V.frames += 1;
    V.dragMs += performance.now() - t0;  // what a drag frame costs (a test reads it)
    sync();
  };
  // the preview before the image's window is known (its data from the server): as it came,
  // or inverted, so that a tick of Invert shows at once
  const renderPlain = () => {
    if (preview && out32) {
      const src = preview.data, dst = out32, inv = V.inv;
      for (let i = 0, n = src.length; i < n; i++) {
        const g = inv ? 255 - src[i] : src[i];
        dst[i] = 0xff000000 | (g << 16) | (g << 8) | g;
      }
      ctx.putImageData(imageData, 0, 0);
      gen += 1;
      showView();
    }
    sync();
  };
  // the canvas (and its pixel buffers) sized for an image
  const useSize = (width, height, max) => {
    canvas.width = width; canvas.height = height;
    imageData = ctx.createImageData(width, height);
    out32 = new Uint32Array(imageData.data.buffer);
    lut = new Uint32Array(max + 1);
  };
  // Films with non-square pixels are drawn at their true aspect: x is scaled by V.s, y by
  // V.s * V.a, V.a being a row's height over a column's width (PixelSpacing, else
  // ImagerPixelSpacing; 1 without): a 50 mm circle on a 0.1 x 0.2 mm film was drawn a tall
  // ellipse (a new-user trial). Image pixels stay the unit of a measurement.
  const sy = () => V.s * V.a;
  const schedule = () => { if (!queued) { queued = true; requestAnimationFrame(renderFast); } };
  // A film shown at less than half its size is drawn from a copy halved k times (each
  // halving averages 2 x 2 pixels), then scaled by 0.5-1: scaled straight down by the
  // browser (bilinear, 4 of 30 pixels read at 0.18x) it dropped thin lines: a marker's
  // 3-pixel arms at fit on a 3,400-pixel film, which the server's preview keeps (a new-user
  // trial, medium; a pleural line is as thin). The copy is made once per frame drawn and
  // zoom level; the full-resolution canvas stays what the pixels are (a test reads it back).
  const levelFor = (s) => (s >= 0.5 ? 0 : Math.min(8, Math.ceil(Math.log2(0.5 / s))));
  const buildMip = (kx, ky) => {  // (each axis halved on its own: non-square pixels)
    let src = canvas, w = canvas.width, h = canvas.height;
    for (let i = 1; i <= Math.max(kx, ky); i++) {
      const last = i === Math.max(kx, ky), fx = i <= kx ? 2 : 1, fy = i <= ky ? 2 : 1;
      const dst = last ? mipEl : (scratch[i] = scratch[i] || document.createElement('canvas'));
      const nw = Math.max(1, Math.ceil(w / fx)), nh = Math.max(1, Math.ceil(h / fy));
      if (dst.width !== nw || dst.height !== nh) { dst.width = nw; dst.height = nh; }
      const c = dst.getContext('2d');
      c.imageSmoothingEnabled = true; c.imageSmoothingQuality = 'low';  // bilinear at 0.5x:
      c.clearRect(0, 0, nw, nh);                                         // a 2-pixel mean
      c.drawImage(src, 0, 0, w, h, 0, 0, w / fx, h / fy);
      src = dst; w /= fx; h /= fy;
    }
    mipGen = gen; mipK = `${kx},${ky}`;
  };
  // Between whole halvings the browser's bilinear scaling still reads only some of the pixels
  // under each screen pixel: 1-pixel line pairs came out as false coarse bars at 0.59x and as
  // a beat at 0.86x (an eleventh new-user trial, medium). Once the view is still (no drag, no
  // zoom, no new window for FINE_AFTER_MS), the film is resampled to exactly its size on
  // screen, each screen pixel the area-weighted mean of the image pixels it covers (the box
  // filter of the halvings and the server's previews, at any scale); the quick copy shows
  // meanwhile. The full-resolution canvas stays what the pixels are (a test reads it back).
  const FINE_AFTER_MS = 120;
  const spans = (n, m) => {  // n pixels onto m: for each of the m, its first pixel and weights
    const f = n / m, first = new Int32Array(m), count = new Int32Array(m), w = [];
    for (let t = 0; t < m; t++) {
      const a = t * f, b = Math.min(n, a + f), i0 = Math.floor(a), i1 = Math.min(n, Math.ceil(b));
      first[t] = i0; count[t] = i1 - i0;
      for (let i = i0; i < i1; i++) w.push((Math.min(b, i + 1) - Math.max(a, i)) / f);
    }
    return {first, count, w: Float32Array.from(w)};
  };
  const fineSize = () => [Math.max(1, Math.round(canvas.width * V.s)),
                          Math.max(1, Math.round(canvas.height * sy()))];
  const buildFine = () => {
    fineTimer = 0;
    if (!imageData || canvas.width <= 1 || V.s >= 1 || sy() >= 1) return;
    if (drag) { fineTimer = setTimeout(buildFine, FINE_AFTER_MS); return; }
    const t0 = performance.now(), sw = canvas.width, sh = canvas.height, [dw, dh] = fineSize();
    const src = imageData.data, xs = spans(sw, dw), ys = spans(sh, dh);
    const rows = new Float32Array(dw * sh);  // each row resampled across
    for (let y = 0; y < sh; y++) {
      const base = y * sw, o = y * dw;
      for (let t = 0, k = 0; t < dw; t++) {
        let acc = 0;
        for (let i = xs.first[t], n = i + xs.count[t]; i < n; i++) acc += src[(base + i) * 4] * xs.w[k++];
        rows[o + t] = acc;
      }
    }
    if (fineEl.width !== dw || fineEl.height !== dh) { fineEl.width = dw; fineEl.height = dh; }
    const c = fineEl.getContext('2d'), out = c.createImageData(dw, dh), o32 = new Uint32Array(out.data.buffer);
    for (let t = 0, k = 0; t < dh; t++) {
      const i0 = ys.first[t], n = ys.count[t], k0 = k;
      for (let x = 0; x < dw; x++) {
        let acc = 0;
        for (let j = 0, kk = k0; j < n; j++) acc += rows[(i0 + j) * dw + x] * ys.w[kk++];
        const g = Math.round(acc);
        o32[t * dw + x] = 0xff000000 | (g << 16) | (g << 8) | g;
      }
      k = k0 + n;
    }
    c.putImageData(out, 0, 0);
    fineKey = `${gen},${dw},${dh}`;
    V.fineMs = performance.now() - t0;  // what a resampling costs (a test prints it)
    showView();
  };
  const showView = () => {
    if (canvas.width > 1 && V.s < 1 && sy() < 1) {
      const [dw, dh] = fineSize();
      if (fineKey === `${gen},${dw},${dh}`) {
        fineEl.style.transform = `translate(${V.tx}px, ${V.ty}px) ` +
          `scale(${V.s * canvas.width / dw}, ${sy() * canvas.height / dh})`;
        fineEl.style.display = 'block';
        mipEl.style.display = 'none'; canvas.style.visibility = 'hidden';
        return;
      }
      clearTimeout(fineTimer);
      fineTimer = setTimeout(buildFine, FINE_AFTER_MS);
    }
    fineEl.style.display = 'none';
    const kx = canvas.width > 1 ? levelFor(V.s) : 0, ky = canvas.width > 1 ? levelFor(sy()) : 0;
    if (!kx && !ky) { mipEl.style.display = 'none'; canvas.style.visibility = ''; return; }
    if (mipGen !== gen || mipK !== `${kx},${ky}`) buildMip(kx, ky);
    mipEl.style.transform = `translate(${V.tx}px, ${V.ty}px) ` +
      `scale(${V.s * 2 ** kx}, ${sy() * 2 ** ky})`;
    mipEl.style.display = 'block';
    canvas.style.visibility = 'hidden';
  };
  const place = () => {
    canvas.style.transform = `translate(${V.tx}px, ${V.ty}px) scale(${V.s}, ${sy()})`;
    fast.style.display = 'none';
    showView();
    drawLine();
  };

  // -- distance in mm from the file's pixel spacing ("uncalibrated" without one) -------------
  // A line's ends are in the full image's pixels whatever is shown: the stand-in (every
  // step-th pixel) or the preview (resampled) while the full image loads, so Measure works at
  // once and the line stays when the full image arrives (a new-user trial on a slow link: a
  // drag with Measure on panned until then). These are full-image pixels per canvas pixel.
  const per = () => {
    const m = V.meta;
    if (!m || !canvas.width) return [1, 1];
    if (V.img && V.img.standIn) return [m.standIn.step, m.standIn.step];
    return [m.width / canvas.width, m.height / canvas.height];
  };
  const drawLine = () => {
    const line = el('wl-line'), L = V.line;
    line.style.display = L ? '' : 'none';
    if (!L) return;
    const [kx, ky] = per();
    const at = (x, y) => [V.tx + x / kx * V.s, V.ty + y / ky * sy()];
    const [x1, y1] = at(L[0], L[1]), [x2, y2] = at(L[2], L[3]);
    for (const [k, v] of Object.entries({x1, y1, x2, y2})) line.setAttribute(k, v);
  };
  const measure = () => {
    const L = V.line, sp = V.meta && V.meta.spacing;
    if (V.meta) { if (L) lines.set(V.meta.image, L); else lines.delete(V.meta.image); }
    if (!L) { V.length = null; el('wl-length').textContent = ''; drawLine(); return; }
    const dx = L[2] - L[0], dy = L[3] - L[1], px = Math.hypot(dx, dy);
    // spacing is (row, column) mm: rows are y, columns are x
    const mm = sp ? Math.hypot(dx * sp[1], dy * sp[0]) : null;
    V.length = {mm, px};
    // ImagerPixelSpacing is at the detector: the patient is magnified there, so it says so
    el('wl-length').textContent = mm === null ? `${px.toFixed(0)} px (uncalibrated)`
      : `${mm.toFixed(1)} mm${V.meta.atDetector ? ' at the detector' : ''}`;
    drawLine();
  };
  const imageAt = (e) => {
    const r = stage.getBoundingClientRect(), [kx, ky] = per();
    return [(e.clientX - r.left - V.tx) / V.s * kx, (e.clientY - r.top - V.ty) / sy() * ky];
  };
  // the part of the stage the film is fitted to: below the toolbar (it wraps when narrow)
  // and above the caption (it covered the film's last 19 px at 1366x768)
  const viewBox = () => {
    const r = stage.getBoundingClientRect(), top = el('enlarged-tools').offsetHeight;
    const bottom = el('wl-caption').offsetHeight;
    return {w: r.width, h: Math.max(r.height - top - bottom, 1), top};
  };
  const fitScale = () => {
    const b = viewBox();
    return Math.min(b.w / canvas.width, b.h / (canvas.height * V.a));
  };
  const fit = () => {
    const b = viewBox();
    V.s = fitScale();
    V.tx = (b.w - canvas.width * V.s) / 2;
    V.ty = b.top + (b.h - canvas.height * sy()) / 2;
    V.fitted = true; view = b;
    place();
  };
  // Current and prior are linked as PACS viewports are: P opens the other study's film on the
  // same part of the chest at the same zoom (it opened at fit, and flipping to compare one
  // zone meant zooming again each time: a new-user trial). The part in view is the zoom over
  // the fit zoom and the film's point (fractions of its width and height) at the view's
  // centre; each study's film keeps its own window. ← → (another projection) start at fit.
  let carry = null;  // the view the image being opened takes at its first fit (P)
  const viewNow = () => {
    if (V.fitted || !canvas.width || !view) return null;
    const b = viewBox(), s = fitScale();
    return {z: V.s / s, fx: (b.w / 2 - V.tx) / (canvas.width * V.s),
            fy: (b.top + b.h / 2 - V.ty) / (canvas.height * sy())};
  };
  const fitOrCarry = () => {
    fit();
    const v = carry; carry = null;
    if (!v) return;
    const b = viewBox();
    V.s *= v.z;
    V.tx = b.w / 2 - v.fx * canvas.width * V.s;
    V.ty = b.top + b.h / 2 - v.fy * canvas.height * sy();
    V.fitted = false; keepInView(); place();
  };
  // A resized window (#21 M1: at 1920 -> 1366 the lower lungs were left off-screen, growing
  // left the film small in a corner): a film still at "fit" is fitted again; one the reader
  // zoomed or panned keeps its zoom and the point at the centre of the view stays there, with
  // a strip of the film always on screen. Window/level, invert and a measurement (in image
  // pixels) are untouched. Resize events come in bursts: one refit per animation frame.
  const keep = (t, size, lo, hi) => {
    const m = Math.min(Math.max(64, (hi - lo) / 3), size, hi - lo);
    return Math.min(Math.max(t, lo + m - size), hi - m);
  };
  // a pan (or a zoom) keeps a third of the view's width and height on the film (or the whole
  // film, when smaller): a film dragged wholly out of it was lost (the resize refit's rule),
  // and a strip of 64 px, kept before, was the film's black border (a new-user trial took
  // the screen for empty)
  const keepInView = () => {
    const b = viewBox();
    V.tx = keep(V.tx, canvas.width * V.s, 0, b.w);
    V.ty = keep(V.ty, canvas.height * sy(), b.top, b.top + b.h);
  };
  const refit = () => {
    refitQueued = false;
    if (!root.hasAttribute('data-open') || !view) return;
    V.refits += 1;
    if (V.fitted) fit();
    else {
      const b = viewBox(), tx = V.tx, ty = V.ty;
      V.tx = keep(tx + (b.w - view.w) / 2, canvas.width * V.s, 0, b.w);
      V.ty = keep(ty + (b.top + b.h / 2) - (view.top + view.h / 2), canvas.height * sy(),
                  b.top, b.top + b.h);
      if (drag) { drag.tx += V.tx - tx; drag.ty += V.ty - ty; }  // a pan under way goes on
      view = b;
      place();
    }
    if (drag && drag.button === 2 && V.img) schedule();  // (place hid a drag's fast frame)
  };

  // -- the controls always say what is on screen ---------------------------------------------
  const sync = () => {
    if (V.img) {  // what is on screen is what this image reopens with
      const id = V.img.image;
      remembered.delete(id);  // (the most recent last: the oldest is forgotten first)
      remembered.set(id, {c: V.c, w: V.w, inv: V.inv});
      if (remembered.size > REMEMBER) remembered.delete(remembered.keys().next().value);
    }
    el('wl-invert').checked = V.inv;
    // until the image's data say its window, there is no window to show or set: the boxes
    // and the menu wait (disabled) rather than show the last image's values; until pixels of
    // full bit depth (the stand-in first) arrive, the 8-bit preview shows only the file's
    // default window, so the controls say that one and wait (disabled): an 8-bit copy
    // windowed again was far from the same window on the full image (a new-user trial)
    const known = !!V.meta, preset = el('wl-preset');
    for (const id of ['wl-preset', 'wl-center', 'wl-width']) el(id).disabled = !V.img;
    if (!known) { el('wl-center').value = ''; el('wl-width').value = ''; return; }
    const def = V.presets['file default'] || [V.c, V.w];
    const [c, w] = V.img ? [V.c, V.w] : def;
    // the preset the reader picked, where another has the same values ("full range" of a
    // file whose default is its full range showed "file default": a new-user trial)
    const same = (k) => V.presets[k] && V.presets[k][0] === c && V.presets[k][1] === w;
    const name = same(V.picked) ? V.picked : Object.keys(V.presets).find(same);
    preset.value = name || 'custom';
    for (const [id, value] of [['wl-center', c], ['wl-width', w]]) {
      const input = el(id);
      if (!(document.activeElement === input && input.dataset.typed)) input.value = fmt(value);
    }
  };
  // Level and window stay within reach of the film's values: a window of 0, a negative one
  // or 1e12 was taken as typed (a grey or black screen, and a box that said so), and a level
  // of 112000 or -44000 on a film of values 8000-60000 (a new-user trial: README says the
  // film's range). The limits: a width of 1 to twice the film's range, a level within the
  // film's range, and never narrower than the presets themselves.
  const limits = (presets) => {
    const [mid, span] = presets['full range'] || [0, 65536];
    const all = Object.values(presets);
    return {c: [Math.min(mid - span / 2, ...all.map((p) => p[0])),
                Math.max(mid + span / 2, ...all.map((p) => p[0]))],
            w: [1, Math.max(2 * span, ...all.map((p) => p[1]))]};
  };
  const within = (x, [lo, hi]) => Math.min(Math.max(x, lo), hi);
  const setWindow = (c, w) => {
    const L = V.limits || {c: [-Infinity, Infinity], w: [1, Infinity]};
    V.c = Math.round(within(c, L.c) * 100) / 100;
    V.w = Math.round(within(w, L.w) * 100) / 100;
  };
  // A typed number as readers write one: "2,500", "2 500" and "2500" are the same (thousands
  // grouped by commas or spaces), "2,5" is 2.5 (a decimal comma). Anything else is not a
  // number and is refused: "2,500" was read as 2 (parseFloat stops at the comma: a new-user
  // trial), and "12abc" as 12.
  const typedNumber = (text) => {
    let t = String(text).trim().replace(/[\s\u00a0\u202f]/g, '');
    if (/^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$/.test(t)) t = t.replace(/,/g, '');
    else if (/^[-+]?\d*,\d+$/.test(t)) t = t.replace(',', '.');
    return /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t) ? Number(t) : NaN;
  };
  const applyTyped = (input) => {
    delete input.dataset.typed;
    const value = typedNumber(input.value);
    if (V.img && !Number.isFinite(value)) {
      el('wl-status').textContent = `"${input.value.trim().slice(0, 20)}" is not a number: ` +
        `the ${input.id === 'wl-center' ? 'level' : 'window'} is unchanged.`;
      sync();
    } else if (V.img) {
      const center = input.id === 'wl-center';
      if (center) setWindow(value, V.w); else setWindow(V.c, value);
      const applied = center ? V.c : V.w, [lo, hi] = V.limits[center ? 'c' : 'w'];
      el('wl-status').textContent = Math.abs(applied - value) > 0.005
        ? `${center ? 'Level' : 'Window'} kept within ${fmt(lo)} … ${fmt(hi)} for this film.`
        : (V.full ? '' : el('wl-status').textContent);
      render();  // at once: Enter and blur both apply (Enter did nothing before)
    } else if (V.meta) sync();  // (nothing to window yet: the boxes say what is shown)
  };

  // -- building the overlay -------------------------------------------------------------------
  const build = () => {
    if (root) return;
    root = document.createElement('div');
    root.id = 'enlarged';
    root.innerHTML = `<div id="wl-stage"><canvas id="wl-canvas"></canvas><canvas id="wl-mip"></canvas><canvas id="wl-fine"></canvas><canvas id="wl-fast"></canvas>
        <svg id="wl-overlay"><line id="wl-line" style="display: none"></line></svg></div>
      <div id="enlarged-tools">
        <span id="wl-which"></span>
        <button type="button" id="prev-image">◀ image</button>
        <button type="button" id="next-image">image ▶</button>
        <button type="button" id="flip-prior" title="the other study's film (P)">current ⇄ prior (P)</button>
        <label>Preset <select id="wl-preset"></select></label>
        <label><input type="checkbox" id="wl-invert"> Invert</label>
        <label>Level <input type="text" inputmode="decimal" id="wl-center" size="9"></label>
        <label>Window <input type="text" inputmode="decimal" id="wl-width" size="9"></label>
        <button type="button" id="wl-measure" aria-pressed="false">Measure</button>
        <span id="wl-length"></span>
        <span id="wl-status"></span>
        <button type="button" id="close-enlarged">Close (Esc)</button>
      </div>
      <div id="wl-caption"></div>`;
    document.body.appendChild(root);
    stage = el('wl-stage'); canvas = el('wl-canvas'); ctx = canvas.getContext('2d');
    fast = el('wl-fast'); fastCtx = fast.getContext('2d'); mipEl = el('wl-mip'); fineEl = el('wl-fine');
    el('close-enlarged').addEventListener('click', () => window.rrgEnlarged(false));
    el('next-image').addEventListener('click', () => step(1));
    el('prev-image').addEventListener('click', () => step(-1));
    el('flip-prior').addEventListener('click', () => flip());
    el('wl-measure').addEventListener('click', () => setMeasuring(!V.measuring));
    // a note about a typed value (kept within the film's range, not a number) is about that
    // value: a preset chosen after it replaced the value, and the note stood over it (a
    // new-user trial)
    const typedNoteDone = () => {
      const status = el('wl-status');
      if (/ kept within | is not a number: /.test(status.textContent)) {
        status.textContent = V.full ? (V.note || '') : 'Loading the full image…';
      }
    };
    el('wl-invert').addEventListener('change', (e) => {
      V.inv = e.target.checked; invertTouched = true; render();
    });
    el('wl-preset').addEventListener('change', (e) => {
      const p = V.presets[e.target.value];
      if (p && V.img) { V.picked = e.target.value; setWindow(p[0], p[1]); typedNoteDone(); render(); }
    });
    for (const id of ['wl-center', 'wl-width']) {
      const input = el(id);
      input.addEventListener('input', () => { input.dataset.typed = '1'; });
      // Enter applies and gives the keys back to the view: P after a typed level went into
      // the box ("1000p", a new-user trial) instead of flipping to the prior
      input.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') { e.preventDefault(); applyTyped(input); input.blur(); }
      });
      input.addEventListener('blur', () => { if (input.dataset.typed) applyTyped(input); });
    }
    // a measurement's ends stay on the film: a drag past the window's edge measured beyond it
    // (446 mm on a 368 mm film, a third new-user trial)
    const onFilm = ([x, y]) => [Math.min(Math.max(x, 0), V.meta.width),
                                Math.min(Math.max(y, 0), V.meta.height)];
    stage.addEventListener('contextmenu', (e) => e.preventDefault());
    stage.addEventListener('mousedown', (e) => {
      e.preventDefault();  // (keeps the focus where it is: a typed box is applied first)
      if (root.contains(document.activeElement)) document.activeElement.blur();
      drag = {button: e.button, x: e.clientX, y: e.clientY, c: V.c, w: V.w, tx: V.tx, ty: V.ty};
      // (on whatever is shown once the image's size is known: the stand-in, even the preview)
      if (e.button === 0 && V.measuring && V.meta && imageData) {
        drag.measure = true; drag.line = V.line;  // (kept if this is only a click)
        const [x, y] = onFilm(imageAt(e));
        V.line = [x, y, x, y]; measure();
      }
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (drag.button === 2 && V.img) {
        // the same on every file: up is brighter, right is wider (MONOCHROME1 has bone low,
        // so its level moves the other way in raw units; defect 5 of a new-user trial)
        const k = Math.max(V.img.span || V.img.max * V.img.slope, 1) / 600;
        // whole values where a pixel of drag moves more than one (no "19070.59")
        const whole = k >= 1 ? Math.round : (x) => x;
        setWindow(whole(drag.c + (V.img.inverted ? -dy : dy) * k), whole(drag.w + dx * k));
        typedNoteDone();  // (a note on a typed value stood through drags: a new-user trial)
        schedule();
      } else if (drag.measure) {
        const [x, y] = onFilm(imageAt(e));
        V.line[2] = x; V.line[3] = y; measure();
      } else if (drag.button === 0) {
        V.tx = drag.tx + dx; V.ty = drag.ty + dy; V.fitted = false; keepInView(); place();
      }
    });
    window.addEventListener('mouseup', () => {
      const windowed = drag && drag.button === 2 && V.img;
      // a click with no drag measures nothing (it said "0.0 mm"): the last line stays
      const [kx, ky] = per();
      if (drag && drag.measure && V.line &&
          Math.hypot((V.line[2] - V.line[0]) / kx * V.s, (V.line[3] - V.line[1]) / ky * sy()) < 3) {
        V.line = drag.line; measure();
      }
      drag = null;
      if (windowed) render();  // the whole image at full resolution again
    });
    stage.addEventListener('wheel', (e) => {
      e.preventDefault();
      const r = stage.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
      // out to a quarter of the fitted size at most (a trial wheeled the film down to 38 px)
      const s = Math.min(Math.max(V.s * (e.deltaY < 0 ? 1.2 : 1 / 1.2), fitScale() / 4), 64);
      const f = s / V.s;  // about the cursor: the point under it stays under it
      V.tx = mx - (mx - V.tx) * f; V.ty = my - (my - V.ty) * f; V.s = s;
      V.fitted = false; keepInView(); place(); typedNoteDone();
    }, {passive: false});
    stage.addEventListener('dblclick', () => fit());
    window.addEventListener('resize', () => {
      if (refitQueued || !root.hasAttribute('data-open')) return;
      refitQueued = true;
      requestAnimationFrame(refit);
    });
  };

  // -- the gallery's films -------------------------------------------------------------------
  // Gradio updates the film panel's HTML in place: the next study's <img> elements are the
  // last study's with a new src, and Chromium goes on drawing the old picture until the new
  // one has loaded, under the new patient's header (0.3-0.6 s on a slow link: a new-user
  // trial, high). A film whose picture is on its way is hidden (black) until it is there; the
  // observer runs before the next paint, so the old picture is never drawn under the new head.
  const FILMS = '#film .film-images img';
  const shownWhenLoaded = (img) => {
    img.classList.toggle('rrg-loading', !(img.complete && img.naturalWidth));
  };
  for (const ev of ['load', 'error']) {  // (an error shows the browser's broken-image sign)
    document.addEventListener(ev, (e) => {
      if (e.target.matches && e.target.matches(FILMS)) e.target.classList.remove('rrg-loading');
    }, true);
  }
  // (watching the film panel only: the whole page's mutations are many on every update)
  const films = new MutationObserver((records) => {
    for (const r of records) {
      if (r.type === 'attributes') {
        if (r.target.matches(FILMS)) shownWhenLoaded(r.target);
        continue;
      }
      for (const n of r.addedNodes) {
        if (n.nodeType !== 1) continue;
        if (n.matches(FILMS)) shownWhenLoaded(n);
        for (const img of n.querySelectorAll(FILMS)) shownWhenLoaded(img);
      }
    }
  });
  let watched = null;
  const watchFilms = () => {  // (the panel is found, or found again if Gradio replaced it)
    const panel = $('#film');
    if (panel === watched) return;
    films.disconnect();
    watched = panel;
    if (!panel) return;
    films.observe(panel, {subtree: true, childList: true, attributes: true,
                          attributeFilter: ['src']});
    for (const img of panel.querySelectorAll(FILMS)) shownWhenLoaded(img);
  };
  watchFilms();
  document.addEventListener('DOMContentLoaded', watchFilms);

  // -- which image ----------------------------------------------------------------------------
  const figures = (film) => [...document.querySelectorAll(
    `#film .film-study.${film === 'prior' ? 'prior' : 'current'} [data-index]`)];
  // Measure is a tool for one image: every image opens with the pan tool (a new-user trial:
  // it stayed on into the next study, so the click meant to start it switched it off)
  const setMeasuring = (on) => {
    V.measuring = on;
    el('wl-measure').setAttribute('aria-pressed', String(on));
    el('wl-stage').classList.toggle('measuring', on);
    if (!root.hasAttribute('data-open')) return;
    const caption = el('wl-caption'), was = caption.offsetHeight;
    caption.textContent = captionHead + hints(on);
    caption.title = caption.textContent;  // (one line, cut at narrow widths: page.css)
    // a caption that now wraps onto another line (or no longer does) moves the view's edge
    if (caption.offsetHeight !== was && !refitQueued) {
      refitQueued = true; requestAnimationFrame(refit);
    }
  };
  // `within`: opened from another film of the same view (P, ← →): the tool in use stays (a
  // drag after P panned where the reader meant to measure: a new-user trial); a film opened
  // from the gallery starts with the pan tool. `region`: the part of the film to show (P).
  let owner = null;  // the current study when the view opened (rrgEnlarged)
  const open = (pick, within = false, region = null) => {
    build();
    setMeasuring(within && V.measuring);
    carry = region;
    const [film, at] = pick.split(':'), figs = figures(film), index = Number(at);
    const fig = figs[index]; if (!fig) return;
    left[film] = {study: fig.closest('.film-study').dataset.study, at: index};
    V.pick = pick; V.img = null; V.full = false; V.meta = null; V.presets = {}; V.line = null;
    // the study whose film this is (the prior's too belongs to the current study's reading)
    const current = document.querySelector('#film .film-study.current');
    owner = current ? current.dataset.study : null;
    V.note = '';
    V.inv = false; V.a = 1; invertTouched = false; preview = null; measure();
    root.setAttribute('data-open', '');
    const study = fig.closest('.film-study'), head = study.querySelector('.film-head');
    // the head names the patient, the prior's as the current study's (whose film it is)
    captionHead = `${head ? head.innerText : ''} · ` +
      `${fig.querySelector('figcaption').innerText} · Image ${index + 1} of ${figs.length} · `;
    el('wl-caption').textContent = captionHead + hints(V.measuring);
    el('wl-caption').title = el('wl-caption').textContent;
    // which study's film, where the eye is (a PACS viewport's corner label): the grey caption
    // alone left a new-user trial unsure whether P had flipped to the prior
    const when = head && head.querySelector('.nobreak');
    const which = el('wl-which');
    which.textContent = `${film === 'prior' ? 'PRIOR' : 'CURRENT'}` +
      (when ? ` · ${when.innerText}` : '');
    which.className = film === 'prior' ? 'prior' : 'current';
    // (never disabled: P and a click without the prior beside say how to show it)
    // ◀ image ▶ only where there is another image to go to (they were on for one film, and
    // did nothing a new-user trial could see)
    for (const id of ['prev-image', 'next-image']) {
      el(id).disabled = figs.length < 2;
      el(id).title = figs.length < 2 ? 'This film has one image' : '';
    }
    el('wl-preset').innerHTML = '';
    el('wl-status').textContent = 'Loading the full image…';
    const img = fig.querySelector('img');  // the film's preview, at once
    if (img && img.complete && img.naturalWidth) {
      const w = img.naturalWidth, h = img.naturalHeight;
      useSize(w, h, 255);
      ctx.drawImage(img, 0, 0);
      gen += 1;
      const rgba = ctx.getImageData(0, 0, w, h).data, grey = new Uint16Array(w * h);
      for (let i = 0; i < grey.length; i++) grey[i] = rgba[i * 4];
      preview = {data: grey, width: w, height: h};
      fitOrCarry();
    } else {  // nothing of the last film stays on the stage meanwhile
      imageData = null; out32 = null; canvas.width = 1; canvas.height = 1; gen += 1; showView();
    }
    sync();
    lastData = null;  // the same image again: its (unchanged) data counts as new
    const button = document.getElementById('enlarge-button'); if (button) button.click();
  };
  // current ⇄ prior (P): the image last opened there of the study shown now, so that P
  // twice comes back to the film left (it went to the frontal from a lateral: a new-user
  // trial), else the same image number where the other study has it, else its last
  // a film's projection from its caption ("1: PA · frontal" -> "frontal"); '' when unknown
  const projection = (fig) => {
    const caption = fig && fig.querySelector('figcaption');
    const words = caption ? caption.innerText.split('·') : [];
    return words.length > 1 ? words[words.length - 1].trim() : '';
  };
  const flip = () => {
    if (!V.pick) return;
    const [film, at] = V.pick.split(':'), other = film === 'prior' ? 'current' : 'prior';
    const figs = figures(other), n = figs.length;
    if (!n) {
      el('wl-status').textContent = priorOffered()
        ? 'No prior beside: Alt+B shows it, then P.'
        : 'No prior study of this patient to flip to.';
      return;
    }
    const was = left[other], study = figs[0].closest('.film-study').dataset.study;
    const back = was && was.study === study && was.at < n ? was.at : null;
    // else the other study's film of the same projection; the zone in view goes along only
    // to the same projection (P from a lateral opened the prior's PA at the lateral's zoom:
    // a new-user trial), and a missing one is said
    // a film not opened yet takes the named preset on screen (each film keeps its own
    // window: "lung" grades each film's lungs on its own histogram); the prior opened at its
    // file default beside a current film at "lung", which could pass for an interval change
    // (a new-user trial)
    const name = el('wl-preset').value;
    carryPreset = name && name !== 'custom' && name !== 'file default' ? name : null;
    // ...and its invert: the prior opened plain beside an inverted current film (a new-user
    // trial compared them so; each film keeps its own once opened)
    carryInvert = V.inv;
    const kind = projection(figures(film)[Number(at)]);
    const same = figs.findIndex((f) => projection(f) === kind);
    const to = back !== null ? back : (same >= 0 ? same : Math.min(Number(at), n - 1));
    const alike = projection(figs[to]) === kind;
    open(`${other}:${to}`, true, alike ? viewNow() : null);
    if (!alike && kind) {
      V.note = `The ${other} study has no ${kind} film: its ` +
        `${projection(figs[to]) || 'other'} film is shown, at fit.`;
      el('wl-status').textContent = V.note;
    }
  };
  const step = (k) => {
    if (!V.pick) return;
    const [film, at] = V.pick.split(':'), n = figures(film).length;
    if (n) open(`${film}:${((Number(at) + k) % n + n) % n}`, true);
  };
  // ← → (page.js): another image, or the one image again at fit; not by its button, which is
  // off on a one-image film
  window.rrgImageStep = step;
  V.draw = render;  // the full-resolution frame (a test times it)
  window.rrgPick = () => V.pick || '';
  // Closed when another study is drawn (page.js, `study`: the study now open): the view is of
  // the study that was. Not when the page first learns which study it shows: a film enlarged
  // in that first moment is of that very study (a loaded run's view closed as it opened).
  window.rrgEnlarged = (on, study) => {
    if (on || !root) return;
    if (study !== undefined && V.pick && owner !== null && owner === String(study)) return;
    // a value typed and not yet applied is applied as the view closes, as leaving the box
    // does (Esc from the Level box threw 12000 away: a new-user trial); the film reopens so
    if (root.contains(document.activeElement)) document.activeElement.blur();
    root.removeAttribute('data-open'); V.pick = null; drag = null;
    // nothing of the study stays behind the closed view (the next may be another patient's)
    V.img = null; V.full = false; V.meta = null; preview = null;
    imageData = null; out32 = null; fastData = null;
    canvas.width = 1; canvas.height = 1; fast.width = 1; fast.height = 1;
    mipEl.width = 1; mipEl.height = 1; mipGen = -1;
    fineEl.width = 1; fineEl.height = 1; fineKey = ''; clearTimeout(fineTimer);
    fast.style.display = 'none'; mipEl.style.display = 'none'; fineEl.style.display = 'none';
    el('wl-caption').textContent = '';
  };
  // A film clicked while the next study is on its way opens that image of the study that
  // comes: it opened the study being left, which closed by itself a moment later as the new
  // one landed (a new-user trial: "the click seems lost"). page.js calls rrgOpenWanted once
  // the answer is on screen (kept while a further step is still on its way: the click is for
  // where the reader ends up); a wish older than WANTED_MS is dropped.
  const WANTED_MS = 5000;
  let wanted = null;
  window.rrgOpenWanted = () => {
    if (!wanted || window.rrgLeaving()) return;
    const w = wanted; wanted = null;
    if (Date.now() - w.at <= WANTED_MS && Number(w.index) < figures(w.film).length) {
      open(`${w.film}:${w.index}`);
    }
  };
  document.addEventListener('click', (e) => {
    const fig = e.target.closest && e.target.closest('#film [data-index]');
    if (!fig) return;
    const film = fig.closest('.film-study.prior') ? 'prior' : 'current';
    if (window.rrgLeaving && window.rrgLeaving()) {
      wanted = {film, index: fig.dataset.index, at: Date.now()};
      return;
    }
    open(`${film}:${fig.dataset.index}`);
  });

  // -- the full-bit-depth pixels --------------------------------------------------------------
  // The image's data (its window presets, before its pixels): the window the image will
  // start at is the reader's own for this image if it was opened before on this page, else
  // the file's default; an Invert ticked before this moment is kept. The controls come alive
  // when the first full-depth pixels (the stand-in) arrive.
  const prepare = (d) => {
    V.meta = d; V.presets = d.presets; V.limits = limits(d.presets);
    const select = el('wl-preset');
    select.innerHTML = '';
    for (const name of [...Object.keys(d.presets), 'custom']) {
      const o = document.createElement('option'); o.value = name; o.textContent = name;
      if (name === 'custom') o.disabled = true;
      select.appendChild(o);
    }
    V.line = lines.get(d.image) || null; measure();
    const mine = remembered.get(d.image), def = d.presets['file default'];
    const same = !mine && carryPreset ? d.presets[carryPreset] : null;
    if (mine) setWindow(mine.c, mine.w);
    else if (same) { V.picked = carryPreset; setWindow(same[0], same[1]); }
    else setWindow(def[0], def[1]);
    carryPreset = null;
    if (!invertTouched) V.inv = mine ? mine.inv : !!carryInvert;
    carryInvert = null;
    render();
  };
  // Progressive, as PACS viewers load: a stand-in first (the same full-depth values with
  // every step-th pixel kept, a few hundred KB), windowed by the same lookup table as the
  // full image, so any window shows as it will on the full image; then the full image. Each
  // replaces what is shown at the window, invert, zoom and pan the view has then: whatever
  // the reader set while the pixels were on their way is kept.
  const swapIn = (d, data, width, height, full) => {
    if (V.meta !== d || V.full) return;  // the reader moved on, or the full image is in
    let max = 0;
    for (let i = 0; i < data.length; i++) if (data[i] > max) max = data[i];
    const was = canvas.width, shown = !!(preview || V.img), range = d.presets['full range'];
    const sp = d.spacing;  // (the preview's pixels are square: the server resampled them)
    V.a = sp ? sp[0] / sp[1] : 1;
    V.img = {data, max, width, height, offset: d.offset, slope: d.slope, span: range && range[1],
             inverted: d.inverted, image: d.image, study: d.study,
             standIn: !full};
    useSize(width, height, max);
    render();
    if (!shown) fitOrCarry(); else if (V.fitted) fit();
    else { V.s *= was / width; place(); }  // zoomed or panned meanwhile: kept
    V.full = full;
    if (full) el('wl-status').textContent = V.note || '';
  };
  // The server's packed pixel file (viewer/service.py `pack_pixels`; gzip is undone by the
  // browser): the high bytes of the differences, then their low bytes; summed back here.
  const unpack = (bytes) => {
    const n = bytes.length >> 1, out = new Uint16Array(n);
    let v = 0;
    for (let i = 0; i < n; i++) { v = (v + ((bytes[i] << 8) | bytes[n + i])) & 0xffff; out[i] = v; }
    return out;
  };
  // A uint16 pixel file (cached: ← → come back to it), fetched once per page: a file still on
  // its way is waited for, not asked for again (on a slow link → ← → fetched each 10 MB file
  // twice), and the study it belongs to is kept with it so that leaving the study stops it.
  const pixels = (url, n, study) => {
    const data = cache.get(url);
    if (data) return Promise.resolve(data);
    const under = pending.get(url);
    if (under) return under.promise;
    const controller = new AbortController();
    const promise = (async () => {
      try {
        const response = await fetch(url, {credentials: 'same-origin', signal: controller.signal});
        if (!response.ok) throw new Error(String(response.status));
        const body = await response.arrayBuffer();
        const got = response.headers.get('x-pixel-coding') === 'delta-planes'
          ? unpack(new Uint8Array(body)) : new Uint16Array(body);
        if (got.length !== n) throw new Error(`${got.length} values, not ${n}`);
        cache.set(url, got);
        while (cache.size > 8) cache.delete(cache.keys().next().value);
        return got;
      } finally {
        if (pending.get(url) && pending.get(url).controller === controller) pending.delete(url);
      }
    })();
    pending.set(url, {promise, controller, study: String(study)});
    return promise;
  };
  // Downloads for films no longer on the page (the reader moved to another study) are stopped:
  // the next study's film waited 22 s behind the last study's lateral on a 1 MB/s link. The
  // film in the enlarged view keeps its own.
  const abandon = () => {
    if (!pending.size) return;
    const studies = new Set([...document.querySelectorAll('#film .film-study[data-study]')]
      .map((f) => f.dataset.study));
    if (!studies.size) return;  // (no film panel to judge by)
    if (V.meta) studies.add(String(V.meta.study));
    for (const [url, p] of pending) {
      if (!studies.has(p.study)) { pending.delete(url); p.controller.abort(); }
    }
  };
  const load = async (d) => {
    V.requested = d.url;
    prepare(d);
    const s = d.standIn;
    if (s && !cache.has(d.url)) {  // both on their way at once; the small one comes first
      pixels(s.url, s.width * s.height, d.study)
        .then((data) => swapIn(d, data, s.width, s.height, false), () => {});
    }
    let data;
    try {
      data = await pixels(d.url, d.width * d.height, d.study);
    } catch (err) {
      if (V.meta === d) el('wl-status').textContent = 'The full image could not be loaded.';
      return;
    }
    swapIn(d, data, d.width, d.height, true);
  };
  setInterval(() => {
    watchFilms();
    abandon();
    const box = $('#wl-data textarea'), raw = box ? box.value : '';
    if (!raw || raw === lastData) return;
    lastData = raw;
    let d = null;
    try { d = JSON.parse(raw); } catch (e) { return; }
    if (root && d && d.pick === V.pick && root.hasAttribute('data-open')) load(d);
  }, 50);
})();
