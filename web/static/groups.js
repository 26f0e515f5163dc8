// groups.js: what the page holds of each group, and how much. A group is
// made by a sync that names it, by the user (opening it, or a send kept
// from before a reload), or by a push. Pushes may come before the sync
// lists a group just joined (the fan-out can be ahead of the store the
// sync reads), so a pushed group no sync named is kept, with the pushes
// that wait for it, until one does; but a server pushing ever new gids
// grew the page without bound. At most MAX_UNLISTED such groups are kept:
// past it the one pushed to longest ago is forgotten, with a warning the
// first time. Nothing is lost: its messages come back with the sync that
// names it and the pull when it is opened. A group the user opened, or
// has sends pending in, is not forgotten. A group a sync named is kept
// while the syncs name it.
//
// The open group holds at most KEEP_OPEN messages, a window of it that
// scrolling moves (trim), and a send of the user's moves to the newest
// (Chat.toNewest). Methods of Chat (chat.js), kept apart.

import { retakeBackoff } from './recovery.js';

// MAX_BUF: pushes held back for a group: the open group, while its gap
// is pulled, or one no sync named yet (a closed group holds none: its
// opening pulls them). Those past it are pulled when the group opens; in
// the open group, by the pull of the gap when it goes on, else at the
// group's next push (its prev shows the gap) or heartbeat.
export const MAX_BUF = 1000;
export const MAX_UNLISTED = 16; // pushed groups no sync named, kept for when one does
export const KEEP_OPEN = 1000; // messages held of the open group, wherever its view is (see trim)

// readMark is how far g is read: the server's read cursor, or what the user
// has seen since, if further.
export const readMark = (g) => Math.max(g.read, g.readWant);

export function newGroup(gid) {
  return {
    gid, known: false, left: false,
    head: -1, ack: -1, read: -1, // the server's, as last heard
    unread: 0, unreadExact: true, // the badge of a group that is not open
    contig: -1, // every message up to it received (or loadable by scrolling up)
    msgs: new Map(), order: [], // held messages, msgids ascending
    buf: new Map(), // pushes waiting for their predecessors, at most MAX_BUF; none in a closed group a sync named
    olderMore: true, loadingOlder: null, // the older page under way (a promise of how many it added)
    dropped: 0, // the oldest held were forgotten this many times (an older page joins onto what it was asked against)
    newerMore: false, loadingNewer: null, // the newest received are not held (see trim); the newer page under way
    readingOld: false, // an older page was taken since the view was last at the newest
    olderPages: 0, // older pages since the opening (see Chat.load)
    atNewest: false, // the user brought the open group's view to the newest (Chat.toNewest): a reconnect keeps it there
    joinsAfter: null, // the held messages are every one after this msgid (an opening at the read cursor, Chat.fromRead); null: unknown
    opened: false, pulling: null, gapping: false,
    retaking: false, retakeAgain: false, retaken: 0, retakeBackoff: retakeBackoff(), // see recovery.js
    unacked: 0, ackDue: 0, readWant: -1, readDue: 0,
    counts: new Map(), // msgid -> {read, audience}, for my messages
    pending: new Map(), // cmid -> outgoing message not yet shown, in the order sent
    sending: null, sendWait: 0, sendBackoff: null, // the one send of the group under way, or the timer of its next try (outbox.js)
    sends: new Map(), // sender + cmid -> {msgid, sentAt} of the last MAX_SENDS shown, oldest first
  };
}

// MAX_SENDS: the sends a group remembers, to show a resend written twice
// (two msgids, one send) once.
export const MAX_SENDS = 1000;

// DEDUP_WINDOW is the server's dedup window (ms, 24 h by default): two
// records of one sender and cmid are one send only when their sent_at
// are at most this apart; past it, the cmid used again is a new message.
export const DEDUP_WINDOW = 24 * 3600 * 1000;
const MAX_SENT_AT = 2 ** 53; // sent_at are compared clamped to this either side of 1970, as the server does

// sameSend reports whether two records of one sender and cmid, sent at a
// and b (ms), are one send: the server's rule, as the Go SDK's sameSend.
export function sameSend(a, b, win = DEDUP_WINDOW) {
  const clamp = (v) => (Number.isFinite(v) ? Math.min(Math.max(v, -MAX_SENT_AT), MAX_SENT_AT) : 0);
  const d = clamp(a) - clamp(b);
  return -win <= d && d <= win;
}

// sendKey is what g.sends knows a send by: its sender and cmid.
const sendKey = (m) => `${m.sender}\u0000${m.cmid}`;

// shownAs is the msgid under which m's send is shown in g, if it is: a
// message of its sender and cmid whose sent_at is within the dedup window.
export function shownAs(g, m) {
  const r = m.cmid ? g.sends.get(sendKey(m)) : undefined;
  return r && sameSend(m.sent_at, r.sentAt) ? r.msgid : undefined;
}

// sentBefore reports whether m repeats a send shown under an earlier
// msgid (a resend the server wrote twice: its history keeps the first,
// but both may be pushed), and remembers m's send. As the Go SDK's: m is
// a second record when the message that holds its key came before it and
// is the same send (sameSend); otherwise it is a new message (the cmid
// used again past the window) and takes the key over. The same message
// again, or an older one, is no second record.
export function sentBefore(g, m) {
  if (!m.cmid) return false;
  const key = sendKey(m);
  const r = g.sends.get(key);
  if (r !== undefined) {
    if (r.msgid < m.msgid && sameSend(m.sent_at, r.sentAt)) return true;
    if (r.msgid < m.msgid) g.sends.set(key, { msgid: m.msgid, sentAt: m.sent_at });
    return false;
  }
  if (g.sends.size >= MAX_SENDS) g.sends.delete(g.sends.keys().next().value);
  g.sends.set(key, { msgid: m.msgid, sentAt: m.sent_at });
  return false;
}

export function insertSorted(arr, v) {
  let lo = 0, hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid] < v) lo = mid + 1; else hi = mid;
  }
  if (arr[lo] !== v) arr.splice(lo, 0, v);
}

export const groups = {
  group(gid) {
    let g = this.groups.get(gid);
    if (!g) {
      g = newGroup(gid);
      this.groups.set(gid, g);
    }
    return g;
  },

  // trim keeps the open group g to KEEP_OPEN messages once new ones were
  // taken, wherever its view is (a tab open all day held all it was
  // handed; so did a view a batch taller than the screen left short of
  // the newest). It lets the oldest go while they are read and the user
  // is not paging up to them; else the newest (newerMore: later ones are
  // not held either, and scrolling down pulls them again, Chat.loadNewer).
  // So an older page asked for or just shown stays, and no unread message
  // goes before it was on screen: the read cursor, which names the newest
  // shown, never passes one.
  trim(g) {
    const over = g.order.length - KEEP_OPEN;
    if (over <= 0) return;
    // The newest read one stays: the view reaches back to the read
    // cursor (Chat.reachesRead), and reads go on.
    let old = 0;
    if (!g.readingOld && !g.loadingOlder) while (old < over && g.order[old + 1] <= readMark(g)) old++;
    this.forgetOld(g, g.order.length - old);
    this.forgetNewest(g, KEEP_OPEN);
  },

  // forgetOld keeps the newest keep messages of g: the rest is below the
  // contiguous cursor, and scrolling up pulls it again.
  forgetOld(g, keep) {
    if (g.order.length <= keep) return;
    g.dropped++;
    const gone = g.order.splice(0, g.order.length - keep);
    this.forget(g, gone);
    g.olderMore = true;
    g.joinsAfter = null;
  },

  // forgetNewest keeps the oldest keep messages of g: the rest, and what
  // is taken after it until scrolling down pulls it again, was received
  // and is not held.
  forgetNewest(g, keep) {
    if (g.order.length <= keep) return;
    this.forget(g, g.order.splice(keep));
    g.newerMore = true;
  },

  forget(g, gone) {
    for (const id of gone) {
      g.msgs.delete(id);
      g.counts.delete(id);
    }
    this.emit('forgotten', { gid: g.gid, msgids: gone });
  },

  // listed: a sync named g; it is kept from now on.
  listed(g) {
    g.known = true;
    this.unlisted.delete(g.gid);
  },

  // forgetUnnamed forgets the groups an earlier sync named that the latest
  // sync (naming those in named) did not: the user is not in them, or the
  // server forgot. Kept, they stayed listed for the life of the page, and
  // a server naming new groups at every sync grew it without bound. One
  // the user opened or has sends pending in stays, and one being pulled or
  // taken up again; one named again later starts afresh from its cursors.
  forgetUnnamed(named) {
    for (const g of this.groups.values()) {
      if (g.known && !named.has(g.gid) && !g.opened && g.pending.size === 0 && !g.pulling && !g.retaking) {
        this.groups.delete(g.gid);
      }
    }
  },

  // pushedUnlisted: a push came for g, which no sync named. It becomes the
  // newest of these; past MAX_UNLISTED the oldest that the user neither
  // opened nor sent to are forgotten.
  pushedUnlisted(g) {
    this.unlisted.delete(g.gid);
    this.unlisted.set(g.gid, g);
    if (this.unlisted.size <= MAX_UNLISTED) return;
    const gone = [];
    for (const u of this.unlisted.values()) {
      if (this.unlisted.size <= MAX_UNLISTED) break;
      if (u === g || u.opened || u.pending.size > 0) continue;
      this.unlisted.delete(u.gid);
      this.groups.delete(u.gid);
      gone.push(u.gid);
    }
    if (gone.length > 0 && !this.warnedUnlisted) {
      this.warnedUnlisted = true;
      console.warn(`chatd: pushes of more than ${MAX_UNLISTED} groups that no sync names: ` +
        `forgetting those pushed to longest ago (${gone.join(', ').slice(0, 200)}); their messages come back by the sync that names them`);
    }
  },
};
