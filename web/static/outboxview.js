// outboxview.js: the open group's sends not yet drawn as messages, each
// with its state (sending, sent, not sent and why, with a Retry).

import { $, el } from './dom.js';

// renderOutbox draws the pending sends of gid below its messages.
export function renderOutbox(chat, gid) {
  const g = chat.group(gid);
  if (!g) return;
  $('outbox').replaceChildren(...[...g.pending.values()].map((p) => {
    const state = { sending: 'sending…', sent: 'sent', failed: `not sent: ${p.error}` }[p.state];
    const li = el('li', { className: `msg mine pending ${p.state}` },
      el('div', { className: 'body', textContent: p.body }), el('div', { className: 'state', textContent: state }));
    li.dataset.cmid = p.cmid;
    if (p.state === 'failed') {
      li.append(el('button', { type: 'button', textContent: 'Retry', onclick: () => chat.outbox.retry(g.gid, p.cmid) }));
    }
    return li;
  }));
}
