// readers.js: the who-read list of one of your messages, beside it.

import { $, el, toast } from './dom.js';

// showReaders asks chat who read msgid of gid and shows the list beside
// anchor (the message's "read by" button), within scroller's bottom.
export async function showReaders(chat, scroller, gid, msgid, anchor) {
  const box = $('readers');
  try {
    const { read, unread } = await chat.whoRead(gid, msgid);
    const items = (names) => names.length ? names.map((n) => el('li', { textContent: n })) : [el('li', { className: 'hint', textContent: 'nobody' })];
    $('readers-read').replaceChildren(...items(read));
    $('readers-unread').replaceChildren(...items(unread));
    box.dataset.msgid = msgid;
    // Beside the message, on its left; below it when there is no room.
    const m = anchor.closest('.msg').getBoundingClientRect();
    const r = anchor.getBoundingClientRect();
    const left = m.left - 232 >= 8;
    box.hidden = false;
    box.style.left = `${left ? m.left - 232 : Math.max(8, r.right - 220)}px`;
    const bottom = scroller.getBoundingClientRect().bottom;
    box.style.top = `${Math.max(8, Math.min(left ? m.top : r.bottom + 4, bottom - box.offsetHeight - 8))}px`;
  } catch (e) {
    toast(`Cannot show who read it: ${e.message}`);
  }
}

$('readers-close').addEventListener('click', () => { $('readers').hidden = true; });
document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') $('readers').hidden = true; });
