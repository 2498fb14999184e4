// rrg-review page script: keyboard, never-lose-an-edit bookkeeping, enlarged view, theme.
// The server is the authority; this script only reports what the page knows (which study the
// boxes belong to, what was typed and when) and keeps unsaved text in localStorage until the
// server has it.
(() => {
  const rrg = window.rrg = {study: null, reader: null, keys: {}, seq: 0, last: Date.now(),
                            shown: {}, base: null, unsaved: false};
  const SECTIONS = {'edit-findings': 'findings', 'edit-impression': 'impression'};
  const $ = (sel) => document.querySelector(sel);
  const box = (section) => $('#edit-' + section + ' textarea');
  const click = (id) => { const el = document.getElementById(id); if (el) el.click(); };
  const storeKey = (study) => `rrg:${rrg.reader}:${study}`;

  // what every text-carrying event sends along (see Client in app/ui/desk.py)
  window.rrgClient = () => JSON.stringify({study: rrg.study, keys: rrg.keys, seq: rrg.seq,
    visible: !document.hidden, idle_ms: Date.now() - rrg.last});

  const remember = () => {
    if (rrg.study === null) return;
    const f = box('findings'), i = box('impression');
    if (!f || !i) return;
    try {
      localStorage.setItem(storeKey(rrg.study), JSON.stringify(
        {findings: f.value, impression: i.value, base: rrg.base, at: Date.now()}));
    } catch (e) { /* storage full or disabled: the server-side saves still run */ }
  };

  document.addEventListener('input', (e) => {
    const owner = e.target.closest && e.target.closest('#edit-findings, #edit-impression');
    if (!owner) return;
    const section = SECTIONS[owner.id], now = Date.now();
    rrg.keys[section] = [rrg.keys[section] ? rrg.keys[section][0] : now, now];
    rrg.seq += 1;
    rrg.unsaved = true;
    remember();
  }, true);
  for (const ev of ['keydown', 'mousedown', 'mousemove', 'wheel']) {
    document.addEventListener(ev, () => { rrg.last = Date.now(); }, {passive: true, capture: true});
  }

  // the server's view of the open study arrives in the (hidden) #sync box
  const restore = (sync) => {
    let entry = null;
    try { entry = JSON.parse(localStorage.getItem(storeKey(sync.study)) || 'null'); } catch (e) {}
    if (!entry) return;
    const same = entry.findings === sync.shown.findings && entry.impression === sync.shown.impression;
    if (same) { localStorage.removeItem(storeKey(sync.study)); return; }
    const note = $('#restore-note');
    if (JSON.stringify(entry.base) !== JSON.stringify(sync.base)) {
      if (note) note.textContent = 'Unsaved text from this browser was edited from an older ' +
        'revision and is not restored (another save came in between).';
      localStorage.removeItem(storeKey(sync.study));
      return;
    }
    for (const section of ['findings', 'impression']) {
      const el = box(section);
      if (!el || el.value === entry[section]) continue;
      el.value = entry[section];
      el.dispatchEvent(new Event('input', {bubbles: true}));
    }
    if (note) note.textContent = 'Restored text you typed before the page was left; it is ' +
      'being saved.';
  };
  const poll = () => {
    const raw = $('#sync textarea');
    if (raw && raw.value) {
      let sync = null;
      try { sync = JSON.parse(raw.value); } catch (e) {}
      if (sync) {
        const changed = sync.study !== rrg.study || sync.reader !== rrg.reader;
        rrg.reader = sync.reader; rrg.shown = sync.shown || {}; rrg.base = sync.base;
        if (changed) {
          rrg.study = sync.study; rrg.keys = {};
          window.rrgEnlarged(false);  // the enlarged view belongs to the study that was open
          const note = $('#restore-note'); if (note) note.textContent = '';
          if (sync.study !== null) restore(sync);
        }
        const f = box('findings'), i = box('impression');
        if (f && i && sync.study !== null) {
          rrg.unsaved = f.value !== (rrg.shown.findings || '') ||
                        i.value !== (rrg.shown.impression || '');
          if (!rrg.unsaved) localStorage.removeItem(storeKey(sync.study));
        }
      }
    }
    applyTheme();
  };
  setInterval(poll, 200);

  window.addEventListener('beforeunload', (e) => {
    poll();
    if (!rrg.unsaved) return;
    remember();
    e.preventDefault();
    e.returnValue = '';
  });

  // theme: dark by default, light as a setting (kept in this browser)
  const applyTheme = () => {
    const dark = (localStorage.getItem('rrg-theme') || 'dark') === 'dark';
    if (document.body && document.body.classList.contains('dark') !== dark) {
      document.body.classList.toggle('dark', dark);
    }
  };
  window.rrgSetTheme = (light) => { localStorage.setItem('rrg-theme', light ? 'light' : 'dark');
                                    applyTheme(); };
  document.addEventListener('DOMContentLoaded', applyTheme);

  // keyboard: KeyboardEvent.code, so Option (Alt) on macOS works whatever letter it types
  const TEXT_INPUTS = ['text', 'number', 'search', 'password', 'email', 'url'];
  const typing = (t) => !!t && (t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' ||
    t.isContentEditable || (t.tagName === 'INPUT' && TEXT_INPUTS.includes(t.type)));
  // an attribute on the overlay itself: Gradio's own re-renders do not touch it
  const enlarged = () => { const el = $('#enlarged'); return !!el && el.hasAttribute('data-open'); };
  window.rrgEnlarged = (open) => {
    const el = $('#enlarged'); if (!el) return;
    if (open) el.setAttribute('data-open', ''); else el.removeAttribute('data-open');
  };
  document.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.code === 'KeyS') { e.preventDefault(); click('save'); return; }
    if (enlarged() && (e.code === 'Escape' || !typing(e.target))) {
      const keys = {Escape: 'close-enlarged', ArrowRight: 'next-image', ArrowLeft: 'prev-image'};
      if (keys[e.code]) { e.preventDefault(); click(keys[e.code]); return; }
    }
    if (e.altKey && !e.ctrlKey && !e.metaKey) {
      const map = {KeyN: 'next-study', KeyP: 'prev-study', KeyA: 'accept', KeyD: 'draft-button',
                   KeyR: 'rate', KeyB: 'toggle-prior'};
      if (map[e.code]) { e.preventDefault(); click(map[e.code]); return; }
      const focus = {KeyF: 'findings', KeyI: 'impression'};
      if (focus[e.code]) { e.preventDefault(); const el = box(focus[e.code]); if (el) el.focus(); }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    const digit = /^(Digit|Numpad)([1-5])$/.exec(e.code);
    if (digit) {
      const input = [...document.querySelectorAll('#likert input[type=radio]')]
        .find((el) => el.value === digit[2] ||
              (el.closest('label') && el.closest('label').innerText.trim() === digit[2]));
      if (input) { e.preventDefault(); input.click(); }
    }
  });

  // the film: a click on an image opens the enlarged view of that image
  document.addEventListener('click', (e) => {
    const fig = e.target.closest && e.target.closest('#film [data-index]');
    if (!fig) return;
    rrg.pick = fig.dataset.index;
    window.rrgEnlarged(true);
    click('enlarge-button');
  });
  window.rrgPick = () => String(rrg.pick === undefined ? '' : rrg.pick);

  // zoom (wheel) and pan (drag) on the enlarged image; double-click resets
  const wlImage = (e) => e.target.closest && e.target.closest('#wl-image img');
  const wlApply = (img) => {
    img.style.transformOrigin = 'center';
    img.style.transform = `translate(${img.dataset.tx || 0}px, ${img.dataset.ty || 0}px) ` +
                          `scale(${img.dataset.scale || 1})`;
  };
  document.addEventListener('wheel', (e) => {
    const img = wlImage(e); if (!img) return;
    e.preventDefault();
    const s = parseFloat(img.dataset.scale || '1') * (e.deltaY < 0 ? 1.2 : 1 / 1.2);
    img.dataset.scale = Math.min(Math.max(s, 1), 16); wlApply(img);
  }, {passive: false});
  let drag = null;
  document.addEventListener('mousedown', (e) => {
    const img = wlImage(e); if (!img) return;
    e.preventDefault();
    drag = {img, x: e.clientX - (+img.dataset.tx || 0), y: e.clientY - (+img.dataset.ty || 0)};
  });
  document.addEventListener('mousemove', (e) => {
    if (!drag) return;
    drag.img.dataset.tx = e.clientX - drag.x; drag.img.dataset.ty = e.clientY - drag.y;
    wlApply(drag.img);
  });
  document.addEventListener('mouseup', () => { drag = null; });
  document.addEventListener('dblclick', (e) => {
    const img = wlImage(e); if (!img) return;
    img.dataset.scale = 1; img.dataset.tx = 0; img.dataset.ty = 0; wlApply(img);
  });
})();
