// grouplist.js: the list of the user's groups, with their unread counts
// (exact, or "N+" when only a bound is known), and the tab's title.
//
// A user in thousands of groups: the list was made anew, every element,
// at every push to a closed group (and twice: its badge, then its
// message), 38 ms at 2,000 groups, so 200 pushes took 16 s of the page's
// one thread. It is drawn at most once a DRAW_EVERY, and a drawing keeps
// the elements of the groups still listed, in place when the list is the
// same, changing only what changed (a badge, a class).

import { $, el } from './dom.js';

export const DRAW_EVERY = 100; // ms

const byGid = new Intl.Collator().compare;

let due = 0; // the drawing asked for, its timer
let drawn = null; // what the list shows: {chat, order (gids joined), items: gid -> {li, badge, cls}}

// renderGroupList draws chat's known groups in name order, current
// marked, within DRAW_EVERY; a click opens one with open(gid). Asked
// again before then, it draws once, as things then are (current and open
// are read then too).
// While a drawing is pending the list says so (data-drawing), for tests.
export function renderGroupList(chat, current, open) {
  if (due) return;
  $('groups').dataset.drawing = '1';
  due = setTimeout(() => {
    due = 0;
    drawGroupList(chat, current(), open);
    delete $('groups').dataset.drawing;
  }, DRAW_EVERY);
}

// forgetGroupList drops what the list showed, and a drawing asked for
// (signing out).
export function forgetGroupList() {
  clearTimeout(due);
  due = 0;
  drawn = null;
  $('groups').replaceChildren();
  delete $('groups').dataset.drawing;
}

function drawGroupList(chat, current, open) {
  if (drawn && drawn.chat !== chat) drawn = null;
  const gs = [...chat.groups.values()].filter((g) => g.known).sort((a, b) => byGid(a.gid, b.gid));
  const order = gs.map((g) => g.gid).join('\n');
  const items = drawn?.items ?? new Map();
  const same = drawn?.order === order;
  let total = 0;
  const lis = [];
  for (const g of gs) {
    let it = items.get(g.gid);
    if (!it) {
      const b = el('button', { type: 'button', className: 'group' }, el('span', { className: 'name', textContent: g.gid }));
      b.addEventListener('click', () => open(g.gid));
      const li = el('li', {}, b);
      li.dataset.gid = g.gid;
      it = { li, button: b, badge: null, text: '', cls: null };
      items.set(g.gid, it);
    }
    let text = '';
    if (!g.opened && g.unread > 0) {
      total += g.unread;
      text = `${g.unread}${g.unreadExact ? '' : '+'}`;
    }
    if (text !== it.text) {
      if (!text) {
        it.badge.remove();
        it.badge = null;
      } else if (it.badge) {
        it.badge.textContent = text;
      } else {
        it.badge = el('span', { className: 'badge', textContent: text, title: 'unread' });
        it.button.append(it.badge);
      }
      it.text = text;
    }
    const cls = [g.gid === current && 'current', g.left && 'left'].filter(Boolean).join(' ');
    if (cls !== it.cls) {
      it.li.className = cls;
      it.cls = cls;
    }
    lis.push(it.li);
  }
  if (!same) {
    const listed = new Set(gs.map((g) => g.gid));
    for (const gid of items.keys()) if (!listed.has(gid)) items.delete(gid);
    const list = document.createDocumentFragment();
    for (const li of lis) list.append(li); // not one call of thousands of arguments
    $('groups').replaceChildren(list);
  }
  drawn = { chat, order, items };
  $('no-groups').hidden = gs.length > 0;
  document.title = total > 0 ? `(${total}) chatd` : 'chatd';
}
