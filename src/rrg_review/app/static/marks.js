// rrg-review review aids (issue #22): marks over the editor boxes and titles on the suggested
// ReXVal rows. The server computes them (app/review/aids.py) into the hidden #review-aids box
// for the text it was sent; this script only draws them. The marks are a layer over the
// textarea that never takes a click or a key: the reader's text, cursor and undo history are
// the textarea's alone. Typing hides a box's marks at once (they would point at the wrong
// words); they come back when the server's answer is for the text in the box (after a pause:
// the boxes' change event runs for the latest text only). It redraws on page.js's poll
// (`rrg.onPoll`), so an open page runs one timer for both.
(() => {
  const SECTIONS = ['findings', 'impression'];
  const COPIED = ['fontFamily', 'fontSize', 'fontWeight', 'fontStyle', 'lineHeight',
                  'letterSpacing', 'wordSpacing', 'textIndent', 'tabSize', 'paddingTop',
                  'paddingRight', 'paddingBottom', 'paddingLeft', 'borderTopWidth',
                  'borderRightWidth', 'borderBottomWidth', 'borderLeftWidth', 'boxSizing'];
  const drawn = {};  // section -> what its layer shows (text and marks), to redraw on change
  const textarea = (section) => document.querySelector(`#edit-${section} textarea`);

  const layerOf = (ta) => {
    const parent = ta.parentElement;
    let el = parent.querySelector(':scope > .rrg-marks');
    if (!el) {
      if (getComputedStyle(parent).position === 'static') parent.style.position = 'relative';
      el = document.createElement('div');
      el.className = 'rrg-marks';
      el.setAttribute('aria-hidden', 'true');
      parent.insertBefore(el, ta.nextSibling);
      ta.addEventListener('scroll', () => { el.scrollTop = ta.scrollTop; }, {passive: true});
    }
    return el;
  };

  const fit = (el, ta) => {
    const cs = getComputedStyle(ta);
    for (const p of COPIED) el.style[p] = cs[p];
    // the textarea's scrollbar narrows its text: the layer's padding takes its place
    const bar = ta.offsetWidth - ta.clientWidth - parseFloat(cs.borderLeftWidth) -
                parseFloat(cs.borderRightWidth);
    el.style.paddingRight = `${parseFloat(cs.paddingRight) + Math.max(bar, 0)}px`;
    el.style.left = `${ta.offsetLeft}px`;
    el.style.top = `${ta.offsetTop}px`;
    el.style.width = `${ta.offsetWidth}px`;
    el.style.height = `${ta.offsetHeight}px`;
    el.scrollTop = ta.scrollTop;
  };

  const draw = (el, text, marks) => {
    const cuts = [...new Set([0, text.length, ...marks.flatMap((m) => [m[0], m[1]])])]
      .filter((c) => c >= 0 && c <= text.length).sort((a, b) => a - b);
    const nodes = [];
    for (let k = 0; k + 1 < cuts.length; k++) {
      const [a, b] = [cuts[k], cuts[k + 1]];
      const over = marks.filter((m) => m[0] <= a && b <= m[1]);
      if (!over.length) { nodes.push(document.createTextNode(text.slice(a, b))); continue; }
      const mark = document.createElement('mark');
      mark.className = [...new Set(over.map((m) => `rrg-mark-${m[2]}`))].join(' ');
      mark.dataset.reason = over.map((m) => m[3]).join('; ');
      mark.textContent = text.slice(a, b);
      nodes.push(mark);
    }
    nodes.push(document.createTextNode('\n'));  // a textarea's last empty line has height
    el.replaceChildren(...nodes);
  };

  const update = () => {
    const raw = document.querySelector('#review-aids textarea');
    let data = null;
    try { data = JSON.parse((raw && raw.value) || 'null'); } catch (e) { data = null; }
    for (const section of SECTIONS) {
      const ta = textarea(section);
      if (!ta) continue;
      const el = layerOf(ta);
      fit(el, ta);
      const fresh = data && data.texts && data.texts[section] === ta.value;
      const marks = fresh ? (data.marks[section] || []) : [];
      const key = JSON.stringify([ta.value, marks]);
      if (drawn[section] !== key) {
        drawn[section] = key;
        draw(el, ta.value, marks);
      }
    }
    const rows = (data && data.rows) || {};
    for (const input of document.querySelectorAll('[id^="rexval-"][id$="-significant"] input')) {
      const category = input.closest('[id]').id.slice(7, -12);
      const title = rows[category] ? `Suggested from your edit: ${rows[category]}` : '';
      if (input.title !== title) input.title = title;
    }
  };

  document.addEventListener('input', (e) => {
    if (!e.target.closest) return;
    const owner = e.target.closest('#edit-findings, #edit-impression');
    if (owner) {  // the marks point at the old text: gone until the server has the new one
      const el = owner.querySelector('.rrg-marks');
      if (el && el.querySelector('mark')) {
        el.replaceChildren(document.createTextNode(e.target.value + '\n'));
        drawn[owner.id.slice(5)] = null;
      }
      return;
    }
    const row = e.target.closest('.rexval-row');  // the reader's own counts now
    if (row) row.querySelectorAll('.rrg-suggested').forEach((b) => b.classList.remove('rrg-suggested'));
  }, true);
  window.rrg.onPoll(update);  // page.js's tick (page.js runs first: app/page.py)
})();
