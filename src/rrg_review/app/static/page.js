// rrg-review page script: keyboard, never-lose-an-edit bookkeeping, enlarged view, theme.
// The server is the authority; this script only reports what the page knows (which study the
// boxes belong to, what was typed and when) and keeps unsaved text in localStorage until the
// server has it.
// the preprocessor of every text-carrying event (Tab.client_js in app/deps.py): the event's
// first n arguments, with the page's report at index i; `carried` names the indices of the
// edit boxes' texts the request carries, s the index of the #sync value gathered with them
// (-1: none). Defined at once: a page load's event may come first.
window.rrgWithClient = (args, n, i, carried, s) => {
  const v = args.slice(0, n);
  const texts = {};
  for (const [name, k] of Object.entries(carried)) texts[name] = v[k];
  v[i] = window.rrgClient ? window.rrgClient(texts, s >= 0 ? v[s] : null) : '{}';
  return v;
};
// the enlarge button's preprocessor: the image the reader clicked (rrgPick) as its input
window.rrgWithPick = (args, i) => {
  const v = args.slice(0, 2);
  v[i] = window.rrgPick ? window.rrgPick() : '';
  return v;
};
// a POST from this page (a GET of /logout signs nobody out, so no other page can). The Log
// out event saved the open study's text first and its answer is drawn: the page reads it now
// (not at its next tick, after the page is gone), so this browser's copy of text the server
// took is removed and no patient's words stay in a shared reading-room browser's storage
// after a sign-out (a new-user trial found them there); text the server did not take (another
// tab's newer save, no connection) is kept for the reader's next sign-in.
window.rrgLogout = () => {
  if (window.rrgReadSync) window.rrgReadSync();
  const form = document.createElement('form');
  form.method = 'post';
  form.action = 'logout';
  document.body.appendChild(form);
  form.submit();
};

(() => {
  // keys: section -> [first, last keystroke (ms), keystroke events, edit operations] since the
  // study was shown (the counts are numbers only: no keystroke text leaves the boxes' value)
  const rrg = window.rrg = {study: null, reader: null, keys: {}, pressed: {}, typed: {}, seq: 0,
                            last: Date.now(), shown: {}, base: null, unsaved: false,
                            strayText: '', answered: 0, stale: null};
  const SECTIONS = {'edit-findings': 'findings', 'edit-impression': 'impression'};
  const $ = (sel) => document.querySelector(sel);
  const box = (section) => $('#edit-' + section + ' textarea');
  // a box given text in the reader's stead (a restore, typing put back over a draft): an
  // input event, so the page and Gradio take it as typed (it is autosaved on top); `caret`
  // ({start, end}) puts the cursor back where it was. Whether the box changed.
  const setBox = (section, value, caret) => {
    const el = box(section);
    if (!el || el.value === value) return false;
    el.value = value;
    if (caret) el.setSelectionRange(caret.start, caret.end);
    el.dispatchEvent(new Event('input', {bubbles: true}));
    return true;
  };
  const click = (id) => { const el = document.getElementById(id); if (el) el.click(); };
  const NUDGE_MS = 1200;
  const nudge = (el) => {
    el.classList.add('rrg-nudge');
    clearTimeout(el.rrgNudge);
    el.rrgNudge = setTimeout(() => el.classList.remove('rrg-nudge'), NUDGE_MS);
  };
  // Unsaved text is kept per tab: two tabs of one browser on one study must never remove or
  // overwrite each other's entry (a tab with nothing unsaved used to delete the study's one
  // entry every 200 ms, so another tab's unsaved text was gone after its reload; found in a
  // new-user trial). A tab's id lives in sessionStorage, so it survives that tab's reload;
  // each open page says it is alive, and the entry of a tab that is gone (closed, crashed) is
  // an orphan that the next page opening that study adopts and restores.
  const ALIVE_MS = 3000;
  const newTabId = () => 't' + Math.random().toString(36).slice(2, 10);
  const aliveKey = (tab) => `rrg-alive:${tab}`;
  const aliveAt = (tab) => {
    try { return (JSON.parse(localStorage.getItem(aliveKey(tab)) || 'null') || {}).at || 0; }
    catch (e) { return 0; }
  };
  const isAlive = (tab) => Date.now() - aliveAt(tab) < ALIVE_MS;
  const TAB = (() => {
    let tab = null;
    try { tab = sessionStorage.getItem('rrg-tab'); } catch (e) {}
    // a duplicated tab copies sessionStorage: its id is then in use by a live page
    if (!tab || isAlive(tab)) tab = newTabId();
    try { sessionStorage.setItem('rrg-tab', tab); } catch (e) {}
    return tab;
  })();
  let beatAt = 0;
  const beat = () => {  // at most once a second (it is called on every tick of the poll)
    if (Date.now() - beatAt < 1000) return;
    beatAt = Date.now();
    try { localStorage.setItem(aliveKey(TAB), JSON.stringify({at: beatAt})); } catch (e) {}
  };
  beat();
  window.addEventListener('pagehide', () => {
    try { localStorage.removeItem(aliveKey(TAB)); } catch (e) {}
  });
  const storeKey = (study) => `rrg:${rrg.reader}:${study}:${TAB}`;
  const ENTRY = /^rrg:(.*):(\d+)(?::(t[a-z0-9]*))?$/;  // (entries of older pages have no tab)
  // another page's entry that no live tab owns: (key, tab) pairs for this reader's study
  const orphans = (study) => {
    const out = [];
    for (let k = 0; k < localStorage.length; k++) {
      const key = localStorage.key(k) || '', m = ENTRY.exec(key);
      if (!m || m[1] !== String(rrg.reader) || Number(m[2]) !== study) continue;
      if (m[3] === TAB || (m[3] && isAlive(m[3]))) continue;
      out.push(key);
    }
    return out;
  };
  // on opening a study: this tab's own entry, else the newest orphan, which becomes this tab's
  const claimEntry = (study) => {
    const own = readEntry(study);
    if (own) return own;
    let best = null, bestKey = null;
    for (const key of orphans(study)) {
      let entry = null;
      try { entry = JSON.parse(localStorage.getItem(key) || 'null'); } catch (e) {}
      if (entry && (!best || (entry.at || 0) > (best.at || 0))) { best = entry; bestKey = key; }
    }
    if (!best) return null;
    writeEntry(study, best);
    try { localStorage.removeItem(bestKey); } catch (e) {}
    return best;
  };

  // The study whose values Gradio gathered for this request: the #sync value gathered with
  // the boxes' texts (`gathered`). Gradio sets its components' values at once when an answer
  // lands but draws them into the page a moment later, and an event it sends in between (a
  // row click held back while the last one was on its way goes out the moment that one
  // lands) carried the new study's values... or the other way round: the boxes' new values
  // with the old study read from the page's #sync. A new-user trial saw DEMO-0002's draft
  // autosaved into DEMO-0003 so, nothing typed. The texts and this study are one snapshot.
  const gatheredStudy = (gathered) => {
    if (typeof gathered !== 'string' || !gathered) return undefined;
    try {
      const sync = JSON.parse(gathered);
      return sync && 'study' in sync ? sync.study : undefined;
    } catch (e) { return undefined; }
  };
  // what every text-carrying event sends along (see Client in app/review/desk.py)
  // (texts: the box values this request carries, noted before it leaves the page)
  window.rrgClient = (texts, gathered) => {
    readSync();  // the study in the boxes now, not as of the last 200 ms tick
    const study = gatheredStudy(gathered);
    if (study !== undefined && study !== rrg.study) {
      // values not yet drawn: this page has seen no keystroke in them (nothing typed to report)
      return JSON.stringify({study, keys: {}, seq: rrg.seq, row: rrg.row,
                             visible: !document.hidden, idle_ms: Date.now() - rrg.last});
    }
    noteSent(texts);
    const keys = {};
    for (const [s, k] of Object.entries(rrg.keys)) keys[s] = [k[0], k[1], rrg.pressed[s] || 0, k[3] || 0];
    const report = {study: rrg.study, keys, seq: rrg.seq, row: rrg.row,
                    visible: !document.hidden, idle_ms: Date.now() - rrg.last};
    // the texts this tab (this one, across its reloads; entries are per tab) sent for the
    // open study: a newer revision holding one of them is this tab's own late save, not
    // another tab's
    const entry = rrg.study === null ? null : readEntry(rrg.study);
    if (entry && entry.sent) report.own = entry.sent;
    if (rrg.study === null) {  // on load: where to resume
      report.left = leftBehind();
      try { report.was = Number(sessionStorage.getItem('rrg-open')) || null; } catch (e) {}
    }
    return JSON.stringify(report);
  };

  const NAMES = ['findings', 'impression'];
  // a textarea's value has \n line ends whatever the stored text has
  const same = (value, stored) => value === (stored || '').replace(/\r\n?/g, '\n');
  const readEntry = (study) => {
    try { return JSON.parse(localStorage.getItem(storeKey(study)) || 'null'); } catch (e) {
      return null; }
  };
  const writeEntry = (study, entry) => {
    try { localStorage.setItem(storeKey(study), JSON.stringify(entry)); } catch (e) {
      /* storage full or disabled: the server-side saves still run */ }
  };
  // The stored entry of a study: the unsaved text, the revisions it was edited from (base),
  // and `sent`: every text of this tab that went to the server in a saving request since.
  // A reload can cut a request off after the server stored it but before its answer (the
  // new base) reached the page; the next load then finds a newer revision holding one of
  // these texts: this tab's own autosave, not another tab's or reader's save.
  const remember = () => {
    if (rrg.study === null || rrg.pending || rrg.stale) return;
    const f = box('findings'), i = box('impression');
    if (!f || !i) return;
    const old = readEntry(rrg.study) || {};
    // typed: the sections the reader typed in and has not saved as they are now; only those
    // are ever put back (the other box may have been empty only because no draft had arrived
    // yet). A section typed, saved, then left alone is not unsaved text: kept here, a reload
    // after another tab saved that section offered to "restore" this tab's older text, and
    // Restore saved it over the other tab's (new-user trial 18, high)
    const value = {findings: f.value, impression: i.value};
    const typed = [...new Set([...(old.typed || []), ...Object.keys(rrg.keys)])]
      .filter((s) => !same(value[s], rrg.shown[s]));
    // nothing typed is unsaved: no copy is kept (a 401 that came while Log out was leaving
    // the page wrote a saved patient's words back into a shared browser: a loaded run)
    if (!typed.length) {
      try { localStorage.removeItem(storeKey(rrg.study)); } catch (e) {}
      return;
    }
    writeEntry(rrg.study, {...value, base: rrg.base, typed, sent: old.sent || {},
                           at: Date.now()});
  };
  // the studies whose unsaved text this browser keeps, newest first (the server opens the
  // newest of its reader's on load, so that it can be restored)
  const leftBehind = () => {
    const out = [];
    for (let k = 0; k < localStorage.length; k++) {
      const m = ENTRY.exec(localStorage.key(k) || '');
      // a live tab's unsaved text is that tab's to save, not this page's to resume
      if (!m || (m[3] && m[3] !== TAB && isAlive(m[3]))) continue;
      let at = 0;
      try { at = JSON.parse(localStorage.getItem(localStorage.key(k))).at || 0; } catch (e) {}
      out.push({reader: m[1], study: Number(m[2]), at});
    }
    return out.sort((a, b) => b.at - a.at).slice(0, 20);
  };
  const SENT_KEPT = 50;
  const noteSent = (texts) => {
    if (rrg.study === null || !texts) return;
    const entry = readEntry(rrg.study);
    if (!entry) return;  // nothing unsaved: nothing to recognise later
    entry.sent = entry.sent || {};
    for (const s of NAMES) {
      const text = texts[s];
      if (typeof text !== 'string' || same(text, rrg.shown[s])) continue;
      const list = (entry.sent[s] || []).filter((t) => t !== text);
      list.push(text);
      entry.sent[s] = list.slice(-SENT_KEPT);
    }
    writeEntry(rrg.study, entry);
  };

  // Leaving a study (Next, Previous, another worklist row): from the click until the boxes
  // show the next study, keystrokes in the boxes are held back. Text typed in that window
  // would belong to neither study for sure: the old study's request has already left with
  // the boxes' text, and the next study's values may land under the cursor mid-word.
  // The hold ends when the next study is on screen, or when the server's answer (or an error)
  // has arrived (`rrgArrived`, a browser-only step chained to each navigation event), or, if
  // no answer ever comes, after LEAVING_MAX_MS.
  const LEAVING_MAX_MS = 30000;
  let leaving = null;
  const STRAY_MS = 1000;
  // the note quotes what went nowhere, so the reader can type it again where it belongs (it
  // only said that keys were dropped, not which: a new-user trial)
  const STRAY_HEAD = 'Keys typed after leaving the last study were not typed into this one';
  // a reading signed in another tab or window while this one had it open and editable (its
  // saves are refused): the words this tab typed into it can be stored nowhere now, so they
  // are quoted in the note (selectable, with its ×), and the reading is drawn again as it was
  // signed, read-only. A new-user trial typed on in such a tab, every save refused and the
  // boxes, Save and Sign as live as before.
  const SIGNED_HEAD = 'This reading was signed in another tab or window; it is read-only now';
  const SIGNED_AGAIN_MS = 3000;
  const signedElsewhere = (sync) => {
    const f = box('findings'), i = box('impression');
    if (!sync.signed || !f || !i) return;
    if (f.disabled && i.disabled) {  // drawn again: the note, once (the answer redrew it)
      if (rrg.signedNote) { setNote(rrg.signedNote); rrg.signedNote = null; }
      return;
    }
    if (Date.now() - (rrg.signedAsked || 0) < SIGNED_AGAIN_MS) return;
    rrg.signedAsked = Date.now();
    if (!rrg.signedNote) {
      const lost = NAMES.filter((s) => !same(box(s).value, rrg.shown[s]) && box(s).value.trim());
      const quoted = lost.map((s) => `${s}: “${box(s).value.trim()}”`).join('; ');
      rrg.signedNote = `${SIGNED_HEAD}.${quoted ? ` Not stored, typed here: ${quoted}` : ''}`;
    }
    click('redraw');
  };
  const strayNote = () => {
    const typed = rrg.strayText.trim();
    const shown = typed.length > 200 ? `${typed.slice(0, 199)}…` : typed;
    return `${STRAY_HEAD}${shown ? ` (“${shown}”)` : ''}: click in a box (or Alt+F) to type here.`;
  };
  // `step` on every animation frame for as long as it says to go on (a watch that must see
  // a change the frame it is drawn: a study landing, a draft landing over typing)
  const everyFrame = (step) => {
    const go = () => { if (step()) requestAnimationFrame(go); };
    requestAnimationFrame(go);
  };
  const startLeaving = () => {
    if (rrg.study === null) return;
    // the cursor leaves the box with the study: keys typed on (a sentence finished after
    // Alt+N) must not land in the next patient's report once it is on screen (a new-user
    // trial saw them there, 3 of 3); they go nowhere while they keep coming, see keydown
    const active = document.activeElement;
    // (what was quoted on the study before is not this move's; a row clicked again by the
    // chase, `chaseRow`, goes on with the same move and keeps what it quoted: a loaded run)
    if (!leaving) rrg.strayText = '';
    if (active && active.closest && active.closest('#edit-findings, #edit-impression')) {
      active.blur();
      rrg.strayUntil = performance.now() + STRAY_MS;  // (the clock of events' timeStamp)
    }
    leaving = {from: rrg.study, until: Date.now() + LEAVING_MAX_MS};
    stepFrom = rrg.study;
    if (refusedSaid && noteIs(refusedSaid)) setNote('');
    document.body.classList.add('rrg-leaving');
    everyFrame(() => { if (leaving) readSync(); return !!leaving; });
  };
  const stopLeaving = () => { leaving = null; document.body.classList.remove('rrg-leaving'); };
  // A row chosen while another was on its way (a click on DEMO-0003's row, then on
  // DEMO-0004's): the page is still on its way until the row chosen last is open. The hold
  // ended when the first row's study landed, and what the reader typed then went into the
  // study only passed through, and was saved there (a new-user trial, 7 of 7).
  const rowOnItsWay = () => !!rrg.rowWanted && rrg.row !== rrg.study;
  window.rrgLeaving = () => !!leaving;  // (viewer.js: a film click then waits for the study)
  // Next / Previous pressed while a study is on its way: Gradio drops a click of a button
  // whose last click has no answer yet, so three quick Alt+N went two studies on (a new-user
  // trial). Such steps wait here and go out one at a time, each once the last has landed; a
  // step that did not move (a conflict holds the study, no study that way) drops the rest.
  // A step is on its way until its answer has landed (`rrgArrived`), not only until the next
  // study is drawn: Gradio closes the step a moment after drawing it, and a press in that
  // moment was dropped too (a second trial: 3 presses 40 ms apart went two studies on).
  const STEPS_KEPT = 10;
  const steps = [];
  let stepFrom = null, replaying = false, steppingUntil = 0;
  // the queue's last moves, for a report of a step that went missing (a CI run once ended
  // three quick Alt+P one study short, and its failure could say only where the page was)
  const stepLog = rrg.stepLog = [];
  const noteStep = (what) => {
    stepLog.push(`${Math.round(performance.now())} ms ${what}`);
    if (stepLog.length > 30) stepLog.shift();
  };
  const queueStep = (id) => {
    noteStep(`queued ${id} behind ${steps.length}`);
    if (steps.length < STEPS_KEPT) steps.push(id);
  };
  // (the answer may land a moment before it is drawn: a step that seems not to have moved is
  // looked at again for STEP_DRAWN_MS before the rest are dropped; a test run beside another
  // whole suite, load 11-14, lost steps with half a second)
  const STEP_DRAWN_MS = 3000, STEP_LOOK_MS = 50;
  const nextStep = (tries = 0) => {
    if (!steps.length) return;
    readSync();
    if (rrg.study === stepFrom) {
      if (tries * STEP_LOOK_MS < STEP_DRAWN_MS) setTimeout(() => nextStep(tries + 1), STEP_LOOK_MS);
      else { noteStep(`dropped ${steps.length}: still on ${stepFrom}`); steps.length = 0; }
      return;
    }
    const id = steps.shift();
    noteStep(`replayed ${id} from ${rrg.study}`);
    replaying = true;
    try { click(id); } finally { replaying = false; }
  };
  // kind: 'step' (Previous/Next) or 'row'. A row's answer that lands while a step is on its
  // way ends nothing: the row's select (a click on the open study's row only saves) was
  // answered after the first of three quick Alt+N had gone, and ended that step's hold; the
  // second Alt+N then went out at once, and Gradio dropped it (2 of 12 tries beside two busy
  // processes went two studies on)
  window.rrgArrived = (kind) => {
    poll();
    noteStep(`arrived ${kind} on ${rrg.study}`);
    if (kind === 'step' || Date.now() >= steppingUntil) {
      if (kind !== 'row' || !rowOnItsWay()) stopLeaving();
      steppingUntil = 0;
      setTimeout(nextStep, 0);  // (after Gradio has closed the answered step)
    }
    if (window.rrgOpenWanted) requestAnimationFrame(window.rrgOpenWanted);
  };
  // A navigation whose join the server refused (429 "Slow down", 401, 403) gets no answer, so
  // `rrgArrived` never came: the page held the reader's keys and steps for LEAVING_MAX_MS,
  // 30 s in which typing in a box was swallowed and Next went nowhere, right after a notice
  // that says to try again. A refused navigation ends the hold at once; steps queued behind
  // it are dropped (the reader was told to wait) and a refused row is not chased.
  // The kinds of event the page treats apart, by the request that sent one: each navigation
  // event, 'step' or 'row', the Log out event, 'logout', and the heartbeat's, 'tick', which the
  // reader did not ask for; null for any other.
  let eventKinds = null;  // fn_index: kind
  const eventKindOf = (init) => {
    if (!eventKinds) {
      const found = new Map();
      for (const d of (window.gradio_config || {}).dependencies || []) {
        const kind = /rrgArrived\("(\w+)"\)|rrg(Logout)\(/.exec(d.js || '');
        if (kind && d.trigger_after != null) found.set(d.trigger_after, kind[1] || 'logout');
        if ((d.targets || []).some((t) => t[1] === 'tick')) found.set(d.id, 'tick');
      }
      if (!found.size) return null;  // (the page's config is not there yet)
      eventKinds = found;
    }
    try { return eventKinds.get(JSON.parse(init.body).fn_index) || null; }
    catch (e) { return null; }
  };
  // A step whose request never went out: Gradio dropped the click (it drops one while it
  // still counts the button's last click as running), and the page then held the reader's
  // keys and the steps queued behind it for LEAVING_MAX_MS, and dropped those steps (one way
  // a CI run on a busy machine could end three quick Alt+P short, as one did). A step whose join
  // was not posted within STEP_SENT_MS is clicked again, up to STEP_RESENDS times, while the
  // page is still leaving the same study. Never a double step: a click Gradio still runs is
  // dropped by it, and a step already answered or drawn ends the leaving.
  const STEP_SENT_MS = 1500, STEP_RESENDS = 3;
  let stepsPosted = 0, resend = 0;
  const watchStepSent = (id, resends) => {
    const posted = stepsPosted, from = stepFrom, hold = leaving;
    setTimeout(() => {
      if (stepsPosted !== posted || !leaving || leaving !== hold || rrg.study !== from) return;
      if (resends >= STEP_RESENDS) {  // (the hold then ends as before: LEAVING_MAX_MS)
        noteStep(`${id} never posted`);
        return;
      }
      noteStep(`resent ${id}`);
      stopLeaving();
      steppingUntil = 0;
      replaying = true; resend = resends + 1;  // (the click handler watches it again)
      try { click(id); } finally { replaying = false; resend = 0; }
    }, STEP_SENT_MS);
  };
  const navigationRefused = (kind) => {
    noteStep(`${kind} refused, dropped ${steps.length}`);
    steps.length = 0;
    if (kind === 'row') rrg.rowWanted = false;
    window.rrgArrived(kind);
  };
  // ... and its sentence ("Slow down: ...") is put on the page here: Gradio shows a refused
  // join's error as a notice only some of the time (a loaded run: nine of the page's Next
  // joins refused, no notice at all), and the reader pressed Next and saw nothing happen.
  // It goes with the next move (`startLeaving`) or study.
  let refusedSaid = null;
  const sayRefused = (response) => {
    response.clone().json().then((body) => {
      const said = body && (body.detail || body.error);
      if (typeof said === 'string' && said) { refusedSaid = `⚠ ${said}`; setNote(refusedSaid); }
    }).catch(() => {});
  };
  const settled = () => {
    if (!leaving) return;
    // (pending is cleared only once the boxes showed the new study's values)
    if (Date.now() > leaving.until && steps.length) {  // no answer came: nothing more goes out
      noteStep(`dropped ${steps.length}: no answer`);
      steps.length = 0;
    }
    if ((rrg.study !== leaving.from && !rrg.pending && !rowOnItsWay()) ||
        Date.now() > leaving.until) stopLeaving();
  };
  document.addEventListener('click', (e) => {
    const button = e.target.closest && e.target.closest('#next-study, #prev-study');
    // a double-click is one step: its second click went out as a second step, and the study
    // between was passed without a word (a new-user trial, 3 of 3); keys (Alt+N twice) and
    // clicks apart still step once each
    if (button && e.detail > 1 && !replaying) {
      e.preventDefault(); e.stopPropagation();
      return;
    }
    if (button) {
      // a study on its way, or steps waiting: this one goes out after them, in order
      if ((leaving || Date.now() < steppingUntil || steps.length) && !replaying) {
        e.preventDefault(); e.stopPropagation();
        queueStep(button.id);
        return;
      }
      steppingUntil = Date.now() + LEAVING_MAX_MS;
      // a step after the last row chosen: a select of that row still on its way (sent again
      // by Gradio with its first data) must not take the reader back there (the server stays)
      rrg.row = -1; rrg.rowWanted = false;
      startLeaving();
      watchStepSent(button.id, resend);
    }
  }, true);
  // A worklist row is chosen on mousedown: Gradio 6's table raises its select then, before
  // the click (so the row noted on click went out with the next click's request, one behind:
  // an eleventh trial's bursts then opened the click before last). Gradio 6 draws the rows as
  // div cells (its <tr> rows are a hidden copy for measuring).
  document.addEventListener('mousedown', (e) => {
    if (e.button !== 0 || !e.target.closest) return;
    const cell = e.target.closest('#worklist .body-cell[data-row]');
    if (!cell) return;
    const table = cell.closest('#worklist');
    const cells = [...table.querySelectorAll(`.body-cell[data-row="${cell.dataset.row}"]`)]
      .map((c) => (c.innerText || '').trim());
    const head = $('#film-head'), open = head && /Study (\S+)/.exec(head.innerText || '');
    // the row chosen last (its id, the first column), sent with the select's event: a click
    // made while another is on its way is sent again afterwards with the first one's data
    if (/^\d+$/.test(cells[0] || '')) {
      const row = Number(cells[0]);
      if (row !== rrg.row || !rrg.rowWanted) rrg.rowTries = 0;
      // (rrg.row stays the row chosen last after it opens: a select sent again later still
      // names it, and the server then only saves)
      rrg.row = row; rrg.rowAt = Date.now(); rrg.rowWanted = true;
      rrg.rowStatus = statusLine();
      if (conflictAsks()) rrg.rowWanted = false;  // the server holds it: answered, not lost
    }
    if (!open || !cells.includes(open[1])) startLeaving();  // the open study's row only saves
  }, true);
  document.addEventListener('beforeinput', (e) => {
    if (!(leaving || rrg.stale) || !e.target.closest ||
        !e.target.closest('#edit-findings, #edit-impression')) return;
    readSync();
    if (leaving || rrg.stale) e.preventDefault();
    // typed into a box while the next study is on its way (a row clicked, then Alt+F and
    // typing): not typed anywhere, and quoted on the study that opens, as keys typed on after
    // leaving are (the first letters vanished without a word: a new-user trial)
    if (leaving && typeof e.data === 'string' && e.data) {
      rrg.strayText = (rrg.strayText || '') + e.data;
      rrg.strayed = true;
      setNote(strayNote());
    }
  }, true);

  // A draft that lands while the reader types. A study opened before the model was done
  // with it gets its draft in a follow-up event, and the server puts it into the boxes only
  // when they hold no text of the reader's: the boxes as gathered when that request left the
  // page. Keys typed between then and its answer were replaced by the draft (beside two busy
  // processes: the draft's impression plus "ssion." stored, the words before gone). While
  // such an answer is on its way, and for a moment after it lands (it is drawn a little
  // later), a box whose text changed under the reader's hands gets back what they typed,
  // with the cursor where it was; the draft stays beside it (Model draft).
  const DRAFT_DRAWN_MS = 3000;
  let draftAsked = null;  // {study, seq, until}
  window.rrgDraftAsked = (v) => {
    readSync();
    draftAsked = {study: rrg.study, seq: rrg.seq, until: Date.now() + LEAVING_MAX_MS};
    return v;
  };
  const keepTyped = () => {
    if (!draftAsked) return;
    if (Date.now() > draftAsked.until || rrg.study !== draftAsked.study) { draftAsked = null; return; }
    if (rrg.seq === draftAsked.seq) return;  // nothing typed since it left: the server saw it all
    const kept = NAMES.filter((s) => rrg.typed[s] && setBox(s, rrg.typed[s].value, rrg.typed[s]));
    if (kept.length) {
      setNote('The draft came in as you typed: your text is kept, the draft is beside it ' +
              '(Model draft).');
    }
  };
  window.rrgDraftLanded = () => {
    if (!draftAsked) return;
    draftAsked.until = Date.now() + DRAFT_DRAWN_MS;
    everyFrame(() => { keepTyped(); return !!draftAsked; });
  };
  // the buttons whose answer replaces the boxes' text on the reader's word (a Save pressed
  // meanwhile keeps the guard: what it stores is the typed text)
  const REPLACING = '#take-theirs, #keep-mine, #use-draft, #revert, #revert-confirm, #accept, ' +
                    '#accept-confirm, #draft-button';
  document.addEventListener('click', (e) => {
    if (e.isTrusted && e.target.closest && e.target.closest(REPLACING)) draftAsked = null;
  }, true);
  // before a key changes a box: a text the draft replaced a moment ago comes back first
  document.addEventListener('beforeinput', (e) => {
    if (e.target.closest && e.target.closest('#edit-findings, #edit-impression')) keepTyped();
  }, true);

  document.addEventListener('input', (e) => {
    const owner = e.target.closest && e.target.closest('#edit-findings, #edit-impression');
    if (!owner) return;
    readSync();  // a study change not yet seen: its keystrokes belong to the new study
    // typing here is what the stray-keys note asked for: it has done its work (it stayed on
    // screen over the reader's typing until the next study: a new-user trial)
    if ($('#restore-note .rrg-stray')) setNote('');
    const section = SECTIONS[owner.id], now = Date.now();
    if (rrg.pending && e.isTrusted) {  // typed before the server's values landed: theirs wins
      rrg.pending = null;
      setNote('Unsaved text from before the page was left is not restored: you typed first.');
    }
    const was = rrg.keys[section];
    // an edit operation: one change of the text by the reader (a typed key, a deletion, a
    // paste); a restore's replayed text is not the reader's typing
    rrg.keys[section] = [was ? was[0] : now, now, 0, ((was && was[3]) || 0) + (e.isTrusted ? 1 : 0)];
    rrg.seq += 1;
    rrg.typed[section] = {value: e.target.value, start: e.target.selectionStart,
                          end: e.target.selectionEnd};
    rrg.typedAt = now;
    markUnsaved({[section]: true});
    remember();
  }, true);
  // keystroke events in a box (not the modifier keys on their own), per section
  document.addEventListener('keydown', (e) => {
    const owner = e.target.closest && e.target.closest('#edit-findings, #edit-impression');
    if (!owner || ['Shift', 'Control', 'Alt', 'Meta', 'CapsLock'].includes(e.key) || leaving) return;
    const section = SECTIONS[owner.id];
    rrg.pressed[section] = (rrg.pressed[section] || 0) + 1;
  }, true);
  for (const ev of ['keydown', 'mousedown', 'mousemove', 'wheel']) {
    document.addEventListener(ev, () => { rrg.last = Date.now(); }, {passive: true, capture: true});
  }

  // the server's view of the open study arrives in the (hidden) #sync box. The restore of
  // unsaved text waits until the boxes show the server's values for that study (Gradio may
  // fill #sync before the boxes, and would then overwrite a restore made too early).
  // Signed out under the page (Log out in another tab, an ended session): every request is
  // then refused with 401 and Gradio shows nothing, so a Save looked like it did nothing (a
  // third new-user trial). Say so; the unsaved text stays in this browser for the next sign-in.
  const SIGNED_OUT = 'You are signed out (Log out in another tab, or the session ended): ' +
    'nothing can be saved now. Your unsaved text is kept in this browser; reload the page and ' +
    'sign in again to save it.';
  // Offline (the server down, a cable pulled), the save status kept its last "Saved" while
  // the reader typed on (a new-user trial): a call to the server that cannot be sent says so
  // until one goes through again, and the text typed meanwhile is kept in this browser.
  const OFFLINE = 'Offline: the server cannot be reached, so nothing is saved now. What you ' +
    'type is kept in this browser and saved once the connection is back.';
  // Typing the server has not stored yet is marked (page.css) on the Save button and on the
  // label of each box that holds it: the status line kept "Editing your saved text (...)", or
  // "Everything is saved", while the reader typed on (two new-user trials). A section's mark
  // goes once its box equals what the server stored.
  const unsaved = {findings: false, impression: false};
  // (rrg.unsaved, what the rest of the page reads, is derived here: any section unsaved)
  const markUnsaved = (sections) => {
    Object.assign(unsaved, sections);
    rrg.unsaved = NAMES.some((s) => unsaved[s]);
    const open = rrg.study !== null, body = document.body;
    for (const s of NAMES) body.classList.toggle(`rrg-unsaved-${s}`, open && unsaved[s]);
    body.classList.toggle('rrg-unsaved', open && rrg.unsaved);
  };
  const plainFetch = window.fetch.bind(window);
  window.fetch = async (...args) => {
    const url = String(args[0] && args[0].url ? args[0].url : args[0]);
    const ours = url.includes('/gradio_api/');
    const join = ours && url.includes('/gradio_api/queue/join') && args[1];
    if (join && eventKindOf(args[1]) === 'step') {  // (`watchStepSent`)
      stepsPosted += 1;
      noteStep('step posted');
    }
    let response;
    try {
      response = await plainFetch(...args);
    } catch (e) {
      if (ours && !(e && e.name === 'AbortError')) {
        remember();
        rrg.offline = true;
        setNote(OFFLINE);
      }
      throw e;
    }
    if (ours && rrg.offline && response.status < 500) {
      rrg.offline = false;
      rrg.onlineAt = Date.now();
      if (noteIs(OFFLINE)) setNote('');
    }
    // signed out, the note says why nothing is saved (Gradio's own red "Error" over the
    // refused request's outputs said nothing more, and covered the status line: a new-user
    // trial saw it flash after Log out in another tab; page.css hides it)
    if (response.status === 401 && ours) {
      remember();
      setNote(SIGNED_OUT);
    }
    // an event's request refused: a queued one's join, or an unqueued one's own call (Save)
    if (response.status >= 400 && ours && args[1] && args[1].method === 'POST') {
      const kind = eventKindOf(args[1]);
      // a refused Log out (429 "Slow down" after a burst of events) signs out all the same:
      // its save did not run, so what is typed stays in this browser for the next sign-in,
      // and a reader who walked away was not left signed in (Gradio runs no `.then` after a
      // refusal: the page stayed as it was)
      if (kind === 'logout') { setTimeout(window.rrgLogout, 0); return response; }
      if (kind === 'step' || kind === 'row') navigationRefused(kind);
      // the sentence of any refused event the reader made (a Save refused so showed nothing
      // else once Gradio's "Error" boxes were hidden, page.css); a heartbeat's is not theirs
      if (response.status === 429 && kind !== 'tick') sayRefused(response);
    }
    return response;
  };
  // the note that restored text is being saved clears once it is saved or superseded (a conflict,
  // Take theirs, Accept): it stayed on screen through all of these (a new-user trial)
  const RESTORED = 'Restored text you typed before the page was left; it is being saved.';
  const REDRAWN = 'The study was drawn again (an answer reached this page late); what you ' +
    'had typed is back in the boxes and is being saved.';
  const setNote = (text, choices) => {
    rrg.restoredNote = text === RESTORED || text === REDRAWN;
    const note = $('#restore-note'); if (!note) return;
    let own = note.querySelector('.rrg-restore');
    if (!text) { if (own) own.remove(); return; }
    if (!own) { own = document.createElement('div'); own.className = 'rrg-restore';
                note.appendChild(own); }
    own.textContent = text;
    // the stray-keys note lies over the draft's buttons and provenance instead of pushing the
    // editor down (at 1366x768 it put Submit rating below the fold: a new-user trial); its ×
    // puts it away, and its quote can be selected and copied (page.css)
    const stray = text.startsWith(STRAY_HEAD) || text.startsWith(SIGNED_HEAD);
    own.classList.toggle('rrg-stray', stray);
    if (stray) {
      const close = document.createElement('button');
      close.type = 'button'; close.className = 'rrg-close'; close.textContent = '×';
      close.title = close.ariaLabel = 'Close this note';
      close.addEventListener('click', () => setNote(''));
      own.prepend(close);
    }
    for (const [label, id, act] of choices || []) {
      const b = document.createElement('button');
      b.textContent = label; b.id = id; b.type = 'button'; b.className = 'rrg-restore-choice';
      b.addEventListener('click', act);
      own.appendChild(b);
    }
  };
  const noteIs = (text) => $('#restore-note .rrg-restore')?.textContent === text;
  const putBack = (entry, sections) => { for (const s of sections) setBox(s, entry[s]); };
  const restore = (entry, sync, note = RESTORED) => {
    if (!entry) return;
    const shown = sync.shown || {}, base = sync.base || {};
    const was = entry.base || {}, sent = entry.sent || {};
    const differs = NAMES.filter((s) => (entry.typed || []).includes(s) &&
                                       typeof entry[s] === 'string' && !same(entry[s], shown[s]));
    if (!differs.length) { localStorage.removeItem(storeKey(sync.study)); return; }
    // a section is safe to restore when no revision came in since its text was edited from
    // base, or the newer revision holds a text this tab itself sent (its own autosave)
    const foreign = differs.filter((s) => (was[s] ?? null) !== (base[s] ?? null) &&
                                          !(sent[s] || []).includes(shown[s] || ''));
    if (!foreign.length) {
      putBack(entry, differs);
      setNote(note);
      return;
    }
    // another tab or reader saved in between: never overwritten silently, the reader chooses
    setNote(`Your unsaved ${differs.join(' and ')} from this browser started from an older ` +
      `revision; a newer version of the ${foreign.join(' and ')} was saved elsewhere in ` +
      'between (it is in the boxes now). ', [
      ['Restore my unsaved text', 'restore-mine', () => {
        putBack(entry, differs);
        setNote('Your unsaved text is back in the boxes; it is saved on top of the newer ' +
                'revision (both kept in the history).');
      }],
      ['Keep the saved text', 'restore-discard', () => {
        localStorage.removeItem(storeKey(sync.study));
        setNote('');
      }]]);
  };
  // A study left for another (Alt+N within a second of typing): the leaving request carried
  // its text, and the server moves on only once that is saved (a conflict holds the study).
  // Its entry then holds nothing unsaved, unless keys came after the request; left behind,
  // it made every reload reopen that patient instead of the one on screen and offer to
  // "restore" text that was saved already (a new-user trial).
  const sentAway = (study, shown) => {
    const entry = readEntry(study);
    if (entry && NAMES.every((s) => typeof entry[s] !== 'string' || same(entry[s], shown[s]) ||
                                    ((entry.sent || {})[s] || []).includes(entry[s]))) {
      localStorage.removeItem(storeKey(study));
    }
  };
  // An answer older than one drawn (each answer's `n` counts up under the tab's lock, server
  // side `sync_json`) that lands after it: its values are not taken. One about another study
  // left that patient's texts or status beside the open study's film (a Revert's answer,
  // handled before a row click, landed after it in a loaded run): the page takes no typing
  // and asks for the open study again (#redraw), and once it is drawn puts back what the
  // reader had typed into it (this browser's copy, kept at every key), unless another save
  // came in between (the reader then chooses, as after a reload). Asked again every
  // REDRAW_AGAIN_MS while no newer answer comes (a refused request gets none).
  const REDRAW_AGAIN_MS = 3000;
  // Every answer's sync as Gradio sets it (the #sync box's change event, app/page.py): two
  // answers can set it between two reads, the older last (an autosave tick's answer after a
  // step's), and the newer was never read: the page took the older one's study for the open
  // one, beside the newer one's film, and a click on that study's row then did nothing for
  // 90 s (a loaded run). An answer about another study, newer than the one read and still
  // not read MISSED_MS later, is taken as lost: the open study is drawn again.
  const MISSED_MS = 1000;
  window.rrgSyncSet = (value) => {
    let sync = null;
    try { sync = JSON.parse(value); } catch (e) { return; }
    if (sync && typeof sync.n === 'number' && (!rrg.newest || sync.n > rrg.newest.n)) {
      rrg.newest = {n: sync.n, study: sync.study, at: Date.now()};
    }
  };
  // Every status line as Gradio sets it (the status line's change event, app/page.py), with
  // its answer's number (`deps.numbered`): a line older than the newest one given lands after
  // it (an autosave tick handled before Alt+A put "saved as revision 1 (autosave)" over
  // Accept's question; a tick's note replaced Sign's refusal: loaded runs), and the newest is
  // put back at once (#status-again, in the browser). A line with no number (none is sent
  // today) is taken as it comes.
  const statusNumber = (value) => {
    const m = /<span data-n="(\d+)"><\/span>$/.exec(typeof value === 'string' ? value : '');
    return m ? Number(m[1]) : null;
  };
  window.rrgStatusSet = (value) => {
    const n = statusNumber(value);
    if (n === null) return;
    if (!rrg.status || n >= rrg.status.n) rrg.status = {n, value};
    else setTimeout(() => click('status-again'), 0);
  };
  window.rrgNewestStatus = () => [rrg.status ? rrg.status.value : ''];
  const missedAnswer = (sync) => !!rrg.newest && rrg.newest.n > sync.n &&
    rrg.newest.study !== sync.study && Date.now() - rrg.newest.at > MISSED_MS;
  const lateAnswer = (sync) => {
    if (typeof sync.n !== 'number') return false;
    const missed = missedAnswer(sync);
    if (sync.n >= rrg.answered && !missed) {
      rrg.answered = sync.n;
      if (rrg.stale) { rrg.stale = null; document.body.classList.remove('rrg-stale'); }
      return false;
    }
    // one about the open study is not taken either, and asks for nothing: an autosave tick's
    // answer and a Save's cross often (two requests of their own), and drawing the study
    // again would put away what the reader is doing (a question asked, a held move)
    if (!missed && sync.study === rrg.study && sync.reader === rrg.reader) return true;
    if (!rrg.stale) {
      rrg.stale = {at: 0};
      document.body.classList.add('rrg-stale');
      if (rrg.study !== null && !rrg.pending) {
        rrg.pending = {study: rrg.study, entry: claimEntry(rrg.study), redrawn: true};
      }
    }
    if (Date.now() - rrg.stale.at >= REDRAW_AGAIN_MS) {
      rrg.stale.at = Date.now();
      click('redraw');
    }
    return true;
  };
  const boxesShow = (shown) => {
    const f = box('findings'), i = box('impression');
    return !!f && !!i && same(f.value, shown.findings) && same(i.value, shown.impression);
  };
  // what the server last drew: the study, its shown texts, and what the page does when they
  // change (cheap: called on every keystroke and, while a study is on its way, every frame)
  const readSync = () => {
    const raw = $('#sync textarea');
    if (raw && raw.value) {
      let sync = null;
      try { sync = JSON.parse(raw.value); } catch (e) {}
      if (sync && lateAnswer(sync)) sync = null;
      if (sync) {
        const changed = sync.study !== rrg.study || sync.reader !== rrg.reader;
        if (changed && rrg.study !== null) sentAway(rrg.study, rrg.shown);
        rrg.reader = sync.reader; rrg.shown = sync.shown || {}; rrg.base = sync.base;
        if (changed) {
          rrg.study = sync.study; rrg.keys = {}; rrg.pressed = {}; rrg.typed = {};
          // this tab's study, kept across its reloads (sessionStorage is per tab)
          try { sessionStorage.setItem('rrg-open', String(sync.study ?? '')); } catch (e) {}
          if (rrg.row === sync.study) rrg.rowWanted = false;  // the row chosen last is open
          rrg.changedAt = Date.now();
          // a new study starts at the top of the editor column: its status line and draft
          // (the column stayed scrolled down at the last one's ReXVal rows: a new-user trial)
          const column = $('#editor-col'); if (column) column.scrollTop = 0;
          if (window.rrgEnlarged) window.rrgEnlarged(false, sync.study);  // the view is of the study that was open
          setNote(rrg.strayed ? strayNote() : '');
          rrg.strayed = false;
          // read now: typing into the new study must not replace it before it is restored
          rrg.pending = sync.study === null ? null : {study: sync.study,
                                                     entry: claimEntry(sync.study)};
        }
        if (!changed && !rrg.pending) signedElsewhere(sync);
        if (rrg.pending && rrg.pending.study === sync.study && boxesShow(rrg.shown)) {
          const {entry, redrawn} = rrg.pending;
          rrg.pending = null;
          restore(entry, sync, redrawn ? REDRAWN : RESTORED);
        }
        const f = box('findings'), i = box('impression');
        if (f && i && sync.study !== null && !rrg.pending) {
          markUnsaved({findings: !same(f.value, rrg.shown.findings),
                       impression: !same(i.value, rrg.shown.impression)});
          if (!rrg.unsaved && !$('#restore-mine')) localStorage.removeItem(storeKey(sync.study));
          const conflict = $('#conflict-row button:not([disabled])');
          if (rrg.restoredNote && (!rrg.unsaved || conflict)) setNote('');
        }
      }
    }
    settled();
  };
  window.rrgReadSync = readSync;
  // readSync, and the page's upkeep (the 200 ms tick, an answer's arrival)
  const poll = () => {
    readSync();
    chaseRow();
    markOpenRow();
    applyTheme();
    refitWorklist();
    titleKeys();
    askInView();
  };
  // the page's one 200 ms timer: the tab's alive beat and the poll, then what the other scripts
  // hang on it with rrg.onPoll (marks.js redraws its highlights; it and the beat ran timers of
  // their own). Each runs on its own: one that throws stops neither the others nor the next
  // tick, and is reported as an uncaught error would be.
  const ticks = [beat, poll, keepTyped];
  rrg.onPoll = (fn) => { ticks.push(fn); };
  setInterval(() => {
    for (const fn of ticks) {
      try { fn(); } catch (e) { window.reportError(e); }
    }
  }, 200);

  // a question the reader must answer is put in view when it is asked: Alt+A pressed in the
  // ReXVal comment at 1366x768 asked above the visible part of the column, and a conflict's
  // banner could be out of view too (issue #21, defect 8)
  const asked = {};
  const RATED = ': study done.';  // the end of a stored rating's line (desk.py `rate`)
  const askInView = () => {
    for (const [id, shown] of [['accept-confirm', 'accept-confirm'],
                              ['revert-confirm', 'revert-confirm'], ['keep-mine', 'save-status']]) {
      const button = document.getElementById(id);
      const on = !!button && !button.disabled;
      if (on && !asked[id]) {
        const first = document.getElementById(shown);
        if (first) first.scrollIntoView({block: 'nearest'});
        button.scrollIntoView({block: 'nearest'});
      }
      asked[id] = on;
    }
    // a refused rating says why under Submit: below the fold at 1366x768, so Alt+R seemed to
    // have rated (a second new-user trial); the refusal is brought into view when it comes
    const rate = document.getElementById('rate-status');
    const said = rate ? rate.textContent : '';
    if (said !== asked.rate) {
      asked.rate = said;
      // so is a stored rating's line: out of view at 1366x768 (Alt+R from the column's end), a
      // new-user trial could not tell the rating was stored
      if (said.includes('⚠') || said.includes(RATED)) rate.scrollIntoView({block: 'nearest'});
      // refused for the tick that confirms the suggested counts: the tick itself, 700 px down
      // the column at 1366x768, is what to look at (a new-user trial did not find it)
      const tick = document.getElementById('rexval-checked');
      if (said.includes('I checked the suggested') && tick) {
        tick.scrollIntoView({block: 'center'});
      }
      // a rating stored (desk.py `rate`): the score, comment and counts are sent
      if (said.includes(RATED)) rrg.ratingTyped = null;
    }
    // so is a warning in the status line: a move held for an unsent comment said so at the top
    // of the column while the reader, scrolled down to the comment, saw nothing happen
    const status = document.getElementById('save-status');
    const line = status ? status.textContent : '';
    if (line !== asked.status) {
      asked.status = line;
      if (line.includes('⚠')) status.scrollIntoView({block: 'nearest'});
    }
  };

  // Gradio 6.17's table draws only the rows its virtual window held after its first non-empty
  // value: a search with no match, then one match, then the whole list again showed one row
  // under "1-4 of 4" (found in a new-user trial; fixed upstream in gradio-app/gradio#13744).
  // A scroll event on the table makes it read the window again, so one follows every new page.
  let worklistLabel = null;
  // each worklist key's whole text as its tooltip (a long key is wrapped, and was cut off)
  // The row clicked last wins, whatever became of its click. Gradio can lose it: a row's
  // select clicked while another is on its way waits for that one, and is dropped when that
  // one fails (a network error), and a click landing while the table is redrawn raises no
  // select at all (a new-user trial: 15 of 32 bursts of clicks 0.15-0.35 s apart left
  // another patient open). Once the page has been still for a moment (no click, no study
  // change), that row is clicked again, at most CHASE_TRIES times; it stops where the reader
  // went elsewhere (Next/Previous), the row left the list, the reader typed into
  // the study on screen since, or a conflict asks the reader first.
  // A click the server held (a conflict asks first) was answered, not lost: it is not sent
  // again once the reader has chosen. The poll saw the conflict's buttons only while they
  // were on, and a Keep mine pressed within that moment left the click to be sent again: the
  // page opened the other study a moment after Keep mine (a browser run beside two busy
  // processes). So the moment they turn on is noted as it happens.
  const CHASE_AFTER_MS = 1500, CHASE_STILL_MS = 1000, CHASE_EVERY_MS = 2500, CHASE_TRIES = 3;
  const conflictAsks = () => !!$('#conflict-row button:not([disabled])');
  const HELD = 'Still on this study';  // a move the server held (page.py `navigate`)
  const statusLine = () => { const s = $('#save-status'); return s ? s.textContent : ''; };
  let conflictWatched = null;
  const watchConflict = () => {
    const row = $('#conflict-row');
    if (!row || row === conflictWatched) return;
    conflictWatched = row;
    new MutationObserver(() => { if (conflictAsks()) rrg.heldAt = Date.now(); })
      .observe(row, {subtree: true, childList: true, attributes: true,
                     attributeFilter: ['disabled']});
  };
  // (a cell's text is read as textContent: innerText lays the page out first, and the poll
  // reads every cell five times a second, every frame while a study is on its way)
  const cellText = (cell) => (cell.textContent || '').trim();
  const rowCells = (id) => [...document.querySelectorAll('#worklist .body-cell[data-row][data-col="0"]')]
    .filter((c) => cellText(c) === String(id));
  const chaseRow = () => {
    watchConflict();
    if (!rrg.rowWanted) return;
    if (rrg.row === rrg.study) { rrg.rowWanted = false; return; }
    if ((rrg.heldAt || 0) >= rrg.rowAt) { rrg.rowWanted = false; return; }  // held
    // held, too, where the status line says so since the click (an unsent comment or counts:
    // the click sent again went through as the reader's second move, and left them unsent
    // without the reader having moved twice: a new-user trial)
    const line = statusLine();
    if (line.includes(HELD) && line !== rrg.rowStatus) { rrg.rowWanted = false; return; }
    const now = Date.now();
    if (now - (rrg.rowAt || 0) < CHASE_AFTER_MS || now - (rrg.changedAt || 0) < CHASE_STILL_MS ||
        now - (rrg.chasedAt || 0) < CHASE_EVERY_MS) return;
    const cell = rowCells(rrg.row)[0];
    if (!cell || (rrg.rowTries || 0) >= CHASE_TRIES || (rrg.typedAt || 0) > rrg.rowAt ||
        conflictAsks()) {
      rrg.rowWanted = false;
      return;
    }
    rrg.rowTries = (rrg.rowTries || 0) + 1;
    rrg.chasedAt = now;
    clickRow(cell);
  };
  // a reader's click on the row of `cell` (its first column), as the mouse makes it
  const clickRow = (cell) => {
    // a cell the table has not selected: a click on its selected cell raises no new select
    const cells = [...cell.parentElement.querySelectorAll('.body-cell[data-col]')];
    const target = cells.find((c) => !c.classList.contains('cell-selected')) || cell;
    for (const type of ['mousedown', 'mouseup', 'click']) {  // Gradio selects on mousedown
      target.dispatchEvent(new MouseEvent(type, {bubbles: true, cancelable: true, button: 0,
                                                 view: window}));
    }
  };
  // Enter in the worklist's search with one study found opens that study, as a PACS opens
  // the one whose accession was typed (a new-user trial typed a study key, pressed Enter and
  // waited; the study was only the list's one row). `ids`: the first column of the rows the
  // search answered with. It opens as a click on its row does (what is typed is saved
  // first); none found, several, or the open study alone: nothing opens. The row is clicked
  // once the table has drawn it (at most a second of frames).
  window.rrgSearched = (ids) => {
    if (ids.length !== 1 || ids[0] === rrg.study || leaving) return;
    let frames = 0;
    const open = () => {
      const cell = rowCells(ids[0])[0];
      if (cell) clickRow(cell);
      else if (++frames < 60) requestAnimationFrame(open);
    };
    requestAnimationFrame(open);
  };
  // ↑ ↓ in the worklist move the table's own selected cell (Gradio's) and open nothing; Enter
  // opens the study of that row, as a click on it does (what is typed is saved first): a
  // new-user trial pressed the arrows and Enter as in a PACS list, and nothing happened
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey ||
        !e.target.closest || !e.target.closest('#worklist') || leaving) return;
    const selected = document.querySelector('#worklist .body-cell.cell-selected[data-row]');
    const first = selected && selected.parentElement.querySelector('.body-cell[data-col="0"]');
    if (!first || cellText(first) === String(rrg.study)) return;
    e.preventDefault();
    clickRow(first);
  }, true);
  // the open study's row is marked (the list marked only the row clicked, and nothing after
  // Next, Previous or a reload: a new-user trial)
  const markOpenRow = () => {
    for (const first of document.querySelectorAll('#worklist .body-cell[data-row][data-col="0"]')) {
      const open = rrg.study !== null && cellText(first) === String(rrg.study);
      if (open && !first.classList.contains('rrg-open')) showRow(first);
      for (const cell of first.parentElement.querySelectorAll('.body-cell[data-row]')) {
        if (cell.classList.contains('rrg-open') !== open) cell.classList.toggle('rrg-open', open);
      }
    }
  };
  // a row newly marked open is scrolled into the list's view, the list alone (not the page
  // under the reader's typing): Next went on down the page's 50 rows while the list showed the
  // first 15 (a new-user trial); a row the reader scrolled away from stays where they put it
  const showRow = (first) => {
    const view = first.closest('.virtual-table-viewport');
    if (!view) return;
    const row = first.getBoundingClientRect(), box = view.getBoundingClientRect();
    const head = view.querySelector('thead');
    const top = box.top + (head ? head.getBoundingClientRect().height : 0);
    if (row.top < top) view.scrollTop -= top - row.top;
    else if (row.bottom > box.bottom) view.scrollTop += row.bottom - box.bottom;
  };
  const titleKeys = () => {
    for (const cell of document.querySelectorAll('#worklist .body-cell[data-col="1"]')) {
      const text = cellText(cell);
      if (cell.title !== text) cell.title = text;
    }
  };
  const refitWorklist = () => {
    const label = $('#worklist-page-label [data-testid="markdown"]');
    const view = $('#worklist .virtual-table-viewport');
    const text = label ? label.textContent : null;
    if (!view || text === worklistLabel) return;
    worklistLabel = text;
    for (const ms of [0, 150, 600]) {
      setTimeout(() => view.dispatchEvent(new Event('scroll')), ms);
    }
  };

  // (the browser's own word that the network went and came back counts too)
  window.addEventListener('offline', () => { rrg.offline = true; });
  window.addEventListener('online', () => { rrg.onlineAt = Date.now(); });
  // The rating's score, comment and counts go with Submit rating: unsent, a reload or a
  // closed tab asks first, as for the report's text (a new-user trial lost both to a reload
  // without a word). Typed: a reader's own input there; sent: the line under Submit rating
  // says the study is done (`askInView`); the study changed: they were left (the server held
  // the move once).
  const RATING_TYPED = '#likert input, #comment textarea, [id^="rexval-"][id$="significant"] input';
  document.addEventListener('input', (e) => {
    if (e.target.matches && e.target.matches(RATING_TYPED)) rrg.ratingTyped = rrg.study;
  }, true);
  const ratingUnsent = () => rrg.ratingTyped != null && rrg.ratingTyped === rrg.study;
  // whether leaving the page now would ask first (a test asks this: a beforeunload event of
  // its own would also close Gradio's client, which listens for one)
  const leaveAsks = () => { poll(); return rrg.unsaved || ratingUnsent(); };
  window.rrgLeaveAsks = leaveAsks;
  window.addEventListener('beforeunload', (e) => {
    if (!leaveAsks()) return;
    if (rrg.unsaved) remember();
    // Gradio reloads the page itself once the server answers again after a lost connection:
    // the guard then asked "Leave site?" of a reader who had done nothing, and Stay left a
    // page that never reconnected and saved nothing (new-user trial 20). The text is kept in
    // this browser (just above) and restored and saved by the reloaded page.
    if (rrg.offline || Date.now() - (rrg.onlineAt || 0) < 30000) return;
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
  document.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.code === 'KeyS') { e.preventDefault(); click('save'); return; }
    // typing on after leaving a study from a box: swallowed (no score keys, no shortcuts)
    // while the keys keep coming; a pause of STRAY_MS ends it. The pause is measured between
    // the keys as pressed (the events' timeStamp), not as handled: a page busy opening the
    // next study handled a burst of keys more than a second late, and a digit typed on then
    // set the score (a browser test beside busy processes)
    // ...but a key typed into a box once the study is open ends that: the reader is at work in
    // the new study (a score key pressed a second after opening, typing and Esc was swallowed
    // as typed on, and the rating that followed went out with the old score: a browser test)
    if (rrg.strayUntil && !leaving && typing(e.target)) rrg.strayUntil = 0;
    if (rrg.strayUntil && e.timeStamp < rrg.strayUntil && !typing(e.target) &&
        !e.ctrlKey && !e.metaKey && !e.altKey) {
      rrg.strayUntil = e.timeStamp + STRAY_MS;
      if (e.key && e.key.length === 1) {
        e.preventDefault();
        // carried over to the study on its way only while one is: set after it had landed,
        // the note came back on the study opened after that (a new-user trial)
        if (leaving) rrg.strayed = true;
        rrg.strayText += e.key;
        setNote(strayNote());
      }
      return;
    }
    if (enlarged() && (e.code === 'Escape' || !typing(e.target))) {
      const keys = {Escape: 'close-enlarged'};
      // P: the current study's film ⇄ the prior's (plain P only: Alt+P is the previous study)
      if (e.code === 'KeyP' && !e.altKey && !e.ctrlKey && !e.metaKey) keys.KeyP = 'flip-prior';
      if (keys[e.code]) { e.preventDefault(); click(keys[e.code]); return; }
      const arrow = {ArrowRight: 1, ArrowLeft: -1}[e.code];
      if (arrow && window.rrgImageStep) { e.preventDefault(); window.rrgImageStep(arrow); return; }
    }
    // Esc leaves a box, so that 1-5 score again: only Tab or a click did, and a reader working
    // from the keyboard typed "4" into the findings instead (a new-user trial)
    if (e.code === 'Escape' && typing(e.target) && !e.ctrlKey && !e.metaKey && !e.altKey) {
      e.target.blur();
      return;
    }
    if (e.altKey && !e.ctrlKey && !e.metaKey) {
      // not while the enlarged view covers the editor and the rating: an accept, a rating, a
      // draft or typing the reader cannot see (a third new-user trial: Alt+R there stored a
      // rating unseen; Alt+F then typed into the hidden findings). Alt+N / Alt+P close it.
      if (enlarged() && ['KeyA', 'KeyR', 'KeyD', 'KeyF', 'KeyI'].includes(e.code)) {
        e.preventDefault();
        const status = document.getElementById('wl-status');
        if (status) status.textContent = 'Close the enlarged view first (Esc): the report ' +
                                         'and the rating are under it.';
        return;
      }
      const map = {KeyN: 'next-study', KeyP: 'prev-study', KeyA: 'accept', KeyD: 'draft-button',
                   KeyR: 'rate', KeyB: 'toggle-prior'};
      if (map[e.code]) {
        e.preventDefault();
        const button = document.getElementById(map[e.code]);
        // a key whose button is off is not silent: the button, which says why (Alt+B on a
        // study without a prior: "No prior study found"), is marked for a moment
        if (button && button.disabled) nudge(button); else click(map[e.code]);
        return;
      }
      const focus = {KeyF: 'findings', KeyI: 'impression'};
      if (focus[e.code]) { e.preventDefault(); const el = box(focus[e.code]); if (el) el.focus(); }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    const digit = /^(Digit|Numpad)([1-5])$/.exec(e.code);
    // not while the enlarged view covers the rating: a score set unseen is a score invented
    if (digit && !enlarged()) {
      const input = [...document.querySelectorAll('#likert input[type=radio]')]
        .find((el) => el.value === digit[2] ||
              (el.closest('label') && el.closest('label').innerText.trim() === digit[2]));
      if (input) { e.preventDefault(); input.click(); }
    }
  });

})();
