// app.js: the page. Sign-in, the group list, one open group, the composer,
// the connection banner and the who-read list. The protocol lives in
// chat.js; this file only draws its state and reports what is on screen.

import { Chat } from './chat.js';
import { addMember, createGroup, devToken } from './admin.js';
import { $, toast } from './dom.js';
import { forgetGroupList, renderGroupList } from './grouplist.js';
import { drawMessage, setReceipt, takeOff } from './message.js';
import { readMark } from './groups.js';
import { renderOutbox as renderOutboxOf } from './outboxview.js';
import { showReaders as showReadersOf } from './readers.js';

let chat = null;
let view = null; // the open group: {gid, readAtOpen, loading}
let countdown = 0;

// --- signing in ---

function showSignin(message = '') {
  $('app').hidden = true;
  $('signin').hidden = false;
  $('banner').hidden = true;
  $('signin-error').textContent = message;
}

$('signin-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const uid = f.uid.value.trim();
  try {
    let token = f.token.value.trim();
    const dev = !token;
    if (dev) token = await devToken(uid);
    if (!token) {
      $('token-field').hidden = false;
      showSignin('This server does not hand out dev tokens: paste a token signed by your deployment.');
      return;
    }
    const s = { uid, token, dev };
    sessionStorage.setItem('chatd.session', JSON.stringify(s));
    start(s);
  } catch (e) {
    showSignin(`Cannot sign in: ${e.message}`);
  }
});

$('signout').addEventListener('click', () => signOut(''));

function signOut(message) {
  chat?.stop();
  chat = null;
  view = null;
  sessionStorage.removeItem('chatd.session');
  // The messages not sent yet go too: the next to sign in here, as the
  // same user, would send them.
  for (const k of Object.keys(sessionStorage)) if (k.startsWith('chatd.outbox.')) sessionStorage.removeItem(k);
  clearInterval(countdown);
  // The next to sign in at this browser sees nothing of this user's.
  observer.disconnect();
  visible.clear();
  $('messages').replaceChildren();
  $('outbox').replaceChildren();
  forgetGroupList();
  $('chat-title').textContent = '';
  $('composer').body.value = ''; // a draft
  $('signin-form').token.value = ''; // the last user's token
  document.title = 'chatd';
  for (const id of ['chat-head', 'scroller', 'composer', 'jump', 'mark-read', 'readers']) $(id).hidden = true;
  $('pick').hidden = false;
  showSignin(message);
}

function start(s) {
  const c = new Chat({
    uid: s.uid, token: s.token, dev: s.dev,
    renew: s.dev ? async () => {
      const token = await devToken(s.uid);
      if (chat !== c) return null; // signed out meanwhile: no session to store
      sessionStorage.setItem('chatd.session', JSON.stringify({ ...s, token }));
      return token;
    } : null,
  });
  chat = c;
  window.chat = chat; // to look at from the console: chat.stats, chat.groups
  $('signin').hidden = true;
  $('app').hidden = false;
  $('me').textContent = s.uid;
  chat.addEventListener('status', (e) => onStatus(e.detail));
  chat.addEventListener('groups', renderGroups);
  chat.addEventListener('messages', (e) => onMessages(e.detail));
  chat.addEventListener('forgotten', (e) => onForgotten(e.detail));
  chat.addEventListener('newer', (e) => onNewer(e.detail));
  chat.addEventListener('pending', (e) => e.detail.gid === view?.gid && renderOutbox());
  chat.addEventListener('counts', (e) => onCounts(e.detail));
  chat.addEventListener('error', (e) => toast(e.detail.message));
  chat.start();
}

// --- the connection ---

function onStatus(d) {
  clearInterval(countdown);
  const st = $('status');
  st.className = `status ${d.state}`;
  switch (d.state) {
    case 'online':
      st.textContent = 'online';
      $('me').textContent = chat.uid;
      $('banner').hidden = true;
      // An older page lost with the last session: at the top no scroll
      // event asks for it again.
      if (view && !view.loading && scroller.scrollTop < 80) loadOlder(view.gid);
      if (view && !view.loading && atBottom()) loadNewer(view.gid); // a newer page, likewise
      break;
    case 'connecting':
      st.textContent = 'connecting…';
      break;
    case 'offline': {
      st.textContent = 'offline';
      const until = Date.now() + d.retryIn;
      const tick = () => {
        const s = Math.ceil((until - Date.now()) / 1000);
        $('banner-text').textContent = `Connection lost${d.reason ? ` (${d.reason})` : ''}. ` +
          (s > 0 ? `Reconnecting in ${s} s…` : 'Reconnecting…') + ' What you send meanwhile goes out when it is back.';
      };
      tick();
      countdown = setInterval(tick, 500);
      $('banner').hidden = false;
      break;
    }
    case 'signed-out':
      signOut(`Signed out: ${d.reason}`);
      break;
  }
}

$('banner-retry').addEventListener('click', () => chat?.retryNow());

// --- groups ---

const renderGroups = () => chat && renderGroupList(chat, () => view?.gid, openGroup);

$('new-group').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const gid = f.gid.value.trim();
  const members = f.members.value.split(/[\s,]+/).filter(Boolean);
  try {
    await createGroup(chat, gid, members);
    f.reset();
    openGroup(gid);
  } catch (e) {
    toast(`Cannot create ${gid}: ${e.message}`);
  }
});

$('add-member').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const uid = f.uid.value.trim();
  try {
    const r = await addMember(chat, view.gid, uid);
    toast(r.added?.length ? `${uid} was added to ${view.gid}` : `${uid} is already a member`);
    f.reset();
  } catch (e) {
    toast(`Cannot add ${uid}: ${e.message}`);
  }
});

// --- the open group ---

const scroller = $('scroller');
const visible = new Set(); // msgids on screen

const observer = new IntersectionObserver((entries) => {
  for (const e of entries) {
    const id = Number(e.target.dataset.msgid);
    const shown = e.isIntersecting &&
      (e.intersectionRatio >= 0.5 || e.intersectionRect.height >= e.rootBounds.height / 2);
    if (shown) visible.add(id); else visible.delete(id);
  }
  reportSeen();
}, { root: scroller, threshold: [0, 0.25, 0.5, 0.75, 1] });

// reportSeen marks read up to the newest message on screen, when the page
// is in front of the user and the group has finished loading.
function reportSeen() {
  if (!chat || !view || view.loading || document.visibilityState !== 'visible' || visible.size === 0) return;
  chat.seen(view.gid, Math.max(...visible));
}
document.addEventListener('visibilitychange', reportSeen);

// watchShown starts the observer afresh on every message drawn: its first
// report, made after the next layout, says what is on screen now. Reports
// queued before (another group, or this one while it loaded and scrolled)
// are dropped with the set they built.
function watchShown() {
  observer.takeRecords();
  observer.disconnect();
  visible.clear();
  for (const li of $('messages').children) observer.observe(li);
}

async function openGroup(gid) {
  const g = chat.group(gid);
  view = { gid, readAtOpen: readMark(g), loading: true };
  observer.takeRecords();
  observer.disconnect();
  visible.clear();
  $('pick').hidden = true;
  $('chat-head').hidden = false;
  scroller.hidden = false;
  $('composer').hidden = false;
  $('chat-title').textContent = gid;
  $('messages').replaceChildren();
  $('jump').hidden = true;
  $('mark-read').hidden = true;
  $('composer').body.disabled = g.left;
  $('composer').body.placeholder = g.left ? 'You left this group.' : 'Write a message; Enter sends, Shift+Enter for a new line';
  onMessages({ gid, msgs: g.order.map((id) => g.msgs.get(id)), older: false });
  renderOutbox();
  try {
    await chat.open(gid);
  } catch (e) {
    chat.failed(`open ${gid}`, e);
  }
  if (view?.gid !== gid) return;
  view.loading = false;
  const first = $('messages').querySelector('.first-unread');
  if (first) first.scrollIntoView({ block: 'start' });
  else scroller.scrollTop = scroller.scrollHeight;
  if (atBottom()) loadNewer(gid); // no scroll event when nothing moved
  // Opened short of the newest (at the first unread, far up): the pushes
  // that say so came while loading, or none came.
  if (chat.group(gid).newerMore) $('jump').hidden = false;
  olderStatus();
  watchShown(); // what loading scrolled past was never read
  $('composer').body.focus();
}

// messageEl draws one message of the open group. Messages that were
// unread when the group was opened (not those arriving live) are marked
// so.
function messageEl(m, paged) {
  const mine = m.sender === chat.uid;
  return drawMessage(m, {
    mine,
    unread: !mine && m.msgid > view.readAtOpen && (view.loading || paged),
    count: chat.group(m.gid || view.gid).counts.get(m.msgid),
    readers: (b) => showReaders(view.gid, m.msgid, b),
  });
}

// onMessages draws messages of the open group in msgid order: new ones at
// the bottom (following them when the view is at the bottom), older pages
// at the top (keeping what is on screen in place), newer pages (pulled
// again when scrolling down, see Chat.loadNewer) at the bottom, the view
// where it is.
function onMessages({ gid, msgs, older, newer }) {
  renderGroups();
  if (!view || gid !== view.gid || msgs.length === 0) return;
  const list = $('messages');
  const fromBottom = scroller.scrollHeight - scroller.scrollTop;
  const wasAtBottom = atBottom();
  for (const m of msgs) {
    const li = messageEl(m, older || newer);
    let next = null;
    for (let c = list.lastElementChild; c && Number(c.dataset.msgid) > m.msgid; c = c.previousElementSibling) next = c;
    list.insertBefore(li, next);
    observer.observe(li);
  }
  list.querySelector('.first-unread')?.classList.remove('first-unread');
  list.querySelector('.unread')?.classList.add('first-unread');
  if (older) {
    scroller.scrollTop = scroller.scrollHeight - fromBottom;
    // The page brought the view back to the read cursor (Chat.reachesRead):
    // the unread messages it, or the pages before it, put above the view
    // were never on screen. The view goes to the first of them, as at an
    // opening; kept in place, it was read as it was, past them.
    const g = chat.group(gid);
    const first = chat.reachesRead(g) && [...list.children].find((li) => Number(li.dataset.msgid) > readMark(g));
    if (first && first.getBoundingClientRect().top < scroller.getBoundingClientRect().top) {
      first.scrollIntoView({ block: 'start' });
      // Reports of what was on screen before, queued and not yet handed
      // over, would be read now that the view reaches the read cursor.
      watchShown();
    }
  } else if (newer) {
    // below what is on screen: nothing moves
  } else if (wasAtBottom || msgs.some((m) => m.sender === chat.uid)) {
    scroller.scrollTop = scroller.scrollHeight;
    // Not past the first new message of others (a resync brings many):
    // what scrolls by unseen is not read.
    const first = msgs.find((m) => m.sender !== chat.uid);
    const li = first && list.querySelector(`.msg[data-msgid="${first.msgid}"]`);
    const over = li ? scroller.getBoundingClientRect().top - li.getBoundingClientRect().top : 0;
    if (over > 0) {
      scroller.scrollTop -= over;
      if (!view.loading) $('jump').hidden = false;
    }
  } else if (!view.loading) {
    $('jump').hidden = false;
  }
  olderStatus();
}

// onForgotten takes off messages of the open group that chat.js no
// longer holds (see Chat.trim, Chat.retake).
function onForgotten({ gid, msgids }) {
  if (!view || gid !== view.gid) return;
  takeOff($('messages'), scroller, msgids, (li, id) => {
    observer.unobserve(li);
    visible.delete(id);
  });
}

// onNewer: messages came that the open group does not hold, its view
// short of the newest (see Chat.trim); scrolling down pulls them.
function onNewer({ gid }) {
  if (!view || gid !== view.gid || view.loading) return;
  $('jump').hidden = false;
  if (atBottom()) loadNewer(gid);
}

// The button brings the view to the newest, as a send does (toBottom).
$('jump').addEventListener('click', () => view && toBottom(view.gid));

const atBottom = () => scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 60;

function olderStatus() {
  const g = view && chat.group(view.gid);
  if (!g) return;
  $('older').textContent = g.olderMore ? (g.loadingOlder ? 'Loading older messages…' : 'Scroll up for older messages.')
    : `The beginning of ${g.gid}.`;
  // Unread messages above the view, never on screen (the view was brought
  // to the newest): nothing is read until it reaches them, or the user
  // marks them read.
  $('mark-read').hidden = view.loading || chat.reachesRead(g) || g.contig <= readMark(g);
}

$('mark-read').addEventListener('click', () => {
  if (!view) return;
  chat.markRead(view.gid);
  olderStatus();
});

// Scrolling near the top pulls the page before the oldest message shown;
// near the bottom, the one after the newest, when the newest received are
// not held.
scroller.addEventListener('scroll', () => {
  if (view && !view.loading && scroller.scrollTop < 80) loadOlder(view.gid);
  if (atBottom()) {
    if (view && !view.loading) loadNewer(view.gid);
    if (!view || !chat.group(view.gid).newerMore) $('jump').hidden = true;
  }
});

async function loadOlder(gid) {
  if (!chat.group(gid).olderMore) return;
  const loading = chat.loadOlder(gid);
  olderStatus();
  try {
    const n = await loading;
    // Still at the top (a short page): the next one.
    if (n > 0 && view?.gid === gid && scroller.scrollTop < 80) loadOlder(gid);
  } catch (e) {
    chat.failed('older messages', e);
  } finally {
    olderStatus();
  }
}

async function loadNewer(gid) {
  try {
    const n = await chat.loadNewer(gid);
    // Still at the bottom (a short page): the next one.
    if (n > 0 && view?.gid === gid && atBottom()) loadNewer(gid);
  } catch (e) {
    chat.failed('newer messages', e);
  }
}

function onCounts({ gid, counts }) {
  if (gid !== view?.gid) return;
  const g = chat.group(gid);
  for (const c of counts) {
    const li = $('messages').querySelector(`.msg[data-msgid="${c.msgid}"]`);
    if (li) setReceipt(li, g.counts.get(c.msgid));
  }
}

// --- sending ---

const renderOutbox = () => view && renderOutboxOf(chat, view.gid);

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const body = ev.target.body;
  const text = body.value.trim();
  body.value = '';
  if (!view || text === '') return;
  chat.outbox.send(view.gid, text);
  toBottom(view.gid);
});

// toBottom brings the view of the open group gid to its newest message:
// the user sent, or asked for the newest ("new messages"). Short of the
// newest (see Chat.toNewest) the view is made again at them (toNewest):
// scrolling to the bottom of the window held pulled one page below it,
// and the newest (the message sent) were nowhere on screen.
function toBottom(gid) {
  if (chat.group(gid).newerMore && !view.loading) toNewest(gid);
  else scroller.scrollTop = scroller.scrollHeight;
}

// toNewest brings the view of gid, short of the newest messages, to them.
// As at an opening, what scrolls by meanwhile is not read.
async function toNewest(gid) {
  view.loading = true;
  try {
    await chat.toNewest(gid);
  } catch (e) {
    chat.failed('newest messages', e);
  }
  if (view?.gid !== gid) return;
  view.loading = false;
  scroller.scrollTop = scroller.scrollHeight;
  $('jump').hidden = true;
  olderStatus();
  watchShown();
}

$('composer').body.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $('composer').requestSubmit();
  }
});

// --- who read ---

const showReaders = (gid, msgid, anchor) => showReadersOf(chat, scroller, gid, msgid, anchor);

// --- start ---

const saved = JSON.parse(sessionStorage.getItem('chatd.session') || 'null');
if (saved) start(saved); else showSignin();
