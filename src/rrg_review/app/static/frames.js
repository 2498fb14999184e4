// rrg-review frame guard, the page's first script (app/frame_guard.py puts it at the top of
// <head>, before Gradio's own scripts take their copy of requestAnimationFrame).
// Gradio's status tracker (6.17, and 6.31 still) times a pending event with an animation-frame
// loop that only a change of the event's status ends. The page's own loader is removed while
// its status is still pending, so its loop ran at 60 frames a second for the page's whole
// life: about 10 % of a core for every open tab, idle (headless Chromium, 2-core machine).
// A loop that asks for its next frame from within its own frame is slowed, once it has run
// LONG frames in a row, to one frame every SLOW_MS: such a timer still moves four times a
// second, and a one-off frame (a drag's redraw, a refit) is never delayed.
(() => {
  const LONG = 120, SLOW_MS = 250;
  const raf = window.requestAnimationFrame.bind(window);
  const cancel = window.cancelAnimationFrame.bind(window);
  const waiting = new Map();  // our id -> {frame, timer}: what cancelAnimationFrame undoes
  let running = 0;  // how many frames in a row the loop whose callback runs now has had
  let last = 0;
  window.requestAnimationFrame = (callback) => {
    const id = ++last, inRow = running + 1, entry = {frame: 0, timer: 0};
    const run = (time) => {
      waiting.delete(id);
      const outer = running;
      running = inRow;
      try { callback(time); } finally { running = outer; }
    };
    if (inRow > LONG) {
      entry.timer = setTimeout(() => { entry.timer = 0; entry.frame = raf(run); }, SLOW_MS);
    } else {
      entry.frame = raf(run);
    }
    waiting.set(id, entry);
    return id;
  };
  window.cancelAnimationFrame = (id) => {
    const entry = waiting.get(id);
    if (!entry) return;
    waiting.delete(id);
    if (entry.timer) clearTimeout(entry.timer);
    if (entry.frame) cancel(entry.frame);
  };
})();
