// grouplist.js: the list of the user's groups, with their unread counts
// (exact, or "N+" when only a bound is known), and the tab's title.

import { $, el } from './dom.js';

// renderGroupList draws chat's known groups in name order, current
// marked; a click opens one with open(gid).
export function renderGroupList(chat, current, open) {
  const gs = [...chat.groups.values()].filter((g) => g.known).sort((a, b) => a.gid.localeCompare(b.gid));
  let total = 0;
  $('groups').replaceChildren(...gs.map((g) => {
    const b = el('button', { type: 'button', className: 'group' }, el('span', { className: 'name', textContent: g.gid }));
    if (!g.opened && g.unread > 0) {
      total += g.unread;
      b.append(el('span', { className: 'badge', textContent: `${g.unread}${g.unreadExact ? '' : '+'}`, title: 'unread' }));
    }
    b.addEventListener('click', () => open(g.gid));
    const li = el('li', { className: [g.gid === current && 'current', g.left && 'left'].filter(Boolean).join(' ') }, b);
    li.dataset.gid = g.gid;
    return li;
  }));
  $('no-groups').hidden = gs.length > 0;
  document.title = total > 0 ? `(${total}) chatd` : 'chatd';
}
