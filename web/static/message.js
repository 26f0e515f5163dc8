// message.js: how a message is drawn (its sender, time and body, marked
// unread if asked, and on the user's own the "read by" count that opens
// who read it), and how drawn ones are taken off.

import { el } from './dom.js';

// drawMessage returns the element of message m: mine (the user's own, with
// its read count, count, and readers called with its button when clicked)
// or unread.
export function drawMessage(m, { mine, unread, count, readers }) {
  // Any int64 is a SentAt: one past what a Date holds is shown without it.
  const at = new Date(m.sent_at);
  const ok = !isNaN(at);
  const li = el('li', { className: mine ? 'msg mine' : 'msg' },
    el('div', { className: 'meta' }, el('b', { textContent: m.sender }), ' ',
      el('time', { textContent: ok ? at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : '',
        dateTime: ok ? at.toISOString() : '' })),
    el('div', { className: 'body', textContent: m.body }));
  li.dataset.msgid = m.msgid;
  li.dataset.sender = m.sender;
  if (mine) {
    const b = el('button', { type: 'button', className: 'receipt' });
    b.addEventListener('click', () => readers(b));
    li.append(b);
    setReceipt(li, count);
  }
  if (unread) li.classList.add('unread');
  return li;
}

// setReceipt shows read count c ({read, audience}, or none yet) on li.
export function setReceipt(li, c) {
  const b = li.querySelector('.receipt');
  if (!b) return;
  b.textContent = `read by ${c ? c.read : 0}`;
  b.title = c ? `${c.read} of ${c.audience} members have read it; click to see who` : 'click to see who has read it';
  b.classList.toggle('all', !!c && c.audience > 0 && c.read >= c.audience);
}

// takeOff removes the elements of msgids from list, calling gone with each
// as it goes, and keeps in place the first message on screen (scroller's)
// that stays.
export function takeOff(list, scroller, msgids, gone) {
  const ids = new Set(msgids);
  const top = scroller.getBoundingClientRect().top;
  let anchor = null;
  for (const li of list.children) {
    if (!ids.has(Number(li.dataset.msgid)) && li.getBoundingClientRect().bottom > top) {
      anchor = li;
      break;
    }
  }
  const was = anchor?.getBoundingClientRect().top;
  for (const id of msgids) {
    const li = list.querySelector(`.msg[data-msgid="${id}"]`);
    if (!li) continue;
    gone(li, id);
    li.remove();
  }
  if (anchor) scroller.scrollTop += anchor.getBoundingClientRect().top - was;
}
