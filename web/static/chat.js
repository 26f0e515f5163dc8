// chat.js: the client's half of the protocol, as the Go SDK (client/) does
// it, without the DOM. At connect: sync (counts only). On open: pull what
// follows the cursor; older history page by page when asked (scrolling up).
// The open group holds a window of at most KEEP_OPEN messages that
// scrolling moves (groups.js). Pushes: dropped when already held (by
// msgid), held back when their prev is not the contiguous cursor until a
// pull fills the gap. Acks every 10 messages or 1 s; reads only for
// messages that were shown and only up to the contiguous cursor. Sends
// keep their cmid across resends. A new session syncs, pulls the open
// group again, flushes cursors and resends; so does a resync frame (the
// server may have lost pushes to us), on the same one.
// A group whose cursor the server refuses as beyond_head (it took a msgid
// the group does not have) is taken up again from the confirmed ack, less
// often while the server repeats it (recovery.js).
//
// Everything runs on the page's one thread; state changes are announced as
// events: status, groups, messages, pending, counts, error. Acks, reads,
// pulls, read counts, syncs and who-read keep to one frame budget
// (pace.js); sends to their own window (outbox.js). Acks and reads
// are in cursors.js, sending in outbox.js, the connection in conn.js, read
// counts in receipts.js, pulls in pulls.js, syncs in sync.js, taking a group up again in
// recovery.js, what is held of each group and its bounds in groups.js,
// the open group's view (opening, reads of what was on screen) in view.js.

import { Conn, Disconnected, Timeout, Backoff, retryable, sleep } from './conn.js';
import { Cursors } from './cursors.js';
import { Outbox } from './outbox.js';
import { Pacer } from './pace.js';
import * as frames from './frames.js';
import { recovery } from './recovery.js';
import { receipts } from './receipts.js';
import { groups, insertSorted, MAX_BUF, sentBefore } from './groups.js';
import { pulls } from './pulls.js';
import { KEEP_CLOSED, views } from './view.js';
import { syncs } from './sync.js';

const HEARTBEAT = 25000;
const RESYNC_RETRY = 2000; // a sync the server asked for, refused, is asked again after this

export class Chat extends EventTarget {
  constructor({ uid, token, dev, renew }) {
    super();
    this.uid = uid;
    this.token = token;
    this.dev = dev;
    this.renew = renew; // async () => a new token, or null
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    this.conn = new Conn(`${proto}//${location.host}/v1/ws`, () => this.token, {
      up: (uid) => this.sessionUp(uid),
      down: (d) => this.sessionDown(d),
      authFailed: (reason) => this.authFailed(reason),
      frame: (f) => this.frame(f),
    });
    this.groups = new Map();
    this.unlisted = new Map(); // gid -> group pushed that no sync named, the one pushed to longest ago first (groups.js)
    this.warnedUnlisted = false;
    this.current = null;
    this.online = false;
    this.stats = { sessions: 0, reconnects: 0, syncs: 0, pulls: 0, olderPulls: 0, pushes: 0, duplicates: 0,
      gaps: 0, acks: 0, reads: 0, sends: 0, resends: 0 };
    this.timers = { heartbeat: 0, sync: 0 };
    this.resyncAsked = false; // see sessionUp
    this.outbox = new Outbox(this);
    this.cursors = new Cursors(this);
    this.pace = new Pacer(); // the page's own frames: see paced
    this.syncWaiting = null; // a sync waiting its turn in the budget: see sync
    this.onOffline = () => this.conn.drop('the browser went offline');
    this.onOnline = () => this.conn.retryNow();
  }

  emit(type, detail = {}) { this.dispatchEvent(new CustomEvent(type, { detail })); }

  start() {
    this.outbox.restore();
    addEventListener('offline', this.onOffline);
    addEventListener('online', this.onOnline);
    this.emit('status', { state: 'connecting' });
    this.conn.start();
  }

  stop() {
    this.online = false; // a stopped Conn reports no down: loops waiting on online end here
    removeEventListener('offline', this.onOffline);
    removeEventListener('online', this.onOnline);
    Object.values(this.timers).forEach(clearTimeout);
    this.cursors.stop();
    this.outbox.stop();
    this.conn.stop();
  }

  // --- sessions ---

  async sessionUp(uid) {
    if (this.stats.sessions++ > 0) this.stats.reconnects++;
    this.uid = uid || this.uid; // the token's user
    this.resyncAsked = false; // set by a resync frame: see frame()
    try {
      await this.sync(true);
    } catch (e) {
      if (!(e instanceof Disconnected)) this.conn.drop(`sync failed: ${e.message}`);
      return;
    }
    this.conn.healthy();
    this.online = true;
    this.emit('status', { state: 'online' });
    this.beat(this.resyncAsked ? 0 : HEARTBEAT);
    this.cursors.flush(false);
    this.outbox.resendAll();
    const g = this.current && this.groups.get(this.current);
    if (g) await this.load(g).catch((e) => this.failed('resync', e)); // what was sent while away
  }

  sessionDown({ retryIn, reason, wasUp }) {
    this.online = false;
    clearTimeout(this.timers.heartbeat);
    this.emit('status', { state: 'offline', retryIn, reason, wasUp });
  }

  async authFailed(reason) {
    this.online = false;
    const token = this.renew && /token_expired|bad_token/.test(reason) ? await this.renew().catch(() => null) : null;
    if (this.conn.stopped) return; // signed out meanwhile: the page is another session's now
    if (token) {
      this.token = token;
      this.conn.redial();
      return;
    }
    this.emit('status', { state: 'signed-out', reason });
  }

  retryNow() { this.conn.retryNow(); }

  // beat syncs every HEARTBEAT: it refreshes the badges, finds pushes that
  // were lost at the tail of the open group, and finds a dead connection.
  // A resync frame (the server may have lost pushes to us) beats at once,
  // and tries again in RESYNC_RETRY while the sync is refused.
  beat(delay = HEARTBEAT) {
    clearTimeout(this.timers.heartbeat);
    this.timers.heartbeat = setTimeout(async () => {
      this.resyncAsked = false; // one asked from here on is about this sync's answer, or later
      try {
        await this.sync();
      } catch (e) {
        if (e instanceof Disconnected) return; // the next session beats again
        if (e instanceof Timeout) return this.conn.drop('no answer to sync');
        // refused (unavailable, rate_limited, …): try at the next beat
        this.beat(delay < HEARTBEAT ? RESYNC_RETRY : HEARTBEAT);
        return;
      }
      const g = this.current && this.groups.get(this.current);
      if (g && g.head > g.contig) this.pullForward(g).catch((e) => this.failed('pull', e));
      this.beat(this.resyncAsked ? 0 : HEARTBEAT);
    }, delay);
  }

  frame(f) {
    switch (f.op) {
      case 'push':
        for (const m of frames.messages(f.msgs, 'push')) this.push(m);
        break;
      case 'receipts': {
        // Only of a group the page is in: those of any other it kept, each
        // a group of its own, hidden and never forgotten.
        const gid = frames.gid(f);
        const g = gid && this.groups.get(gid);
        if (g && (g.known || g.opened)) this.receipts(gid, f.counts);
        else if (gid) frames.dropped('the receipts of a group the page is not in', f);
        break;
      }
      case 'resync': // pushes to us may have been lost: sync and pull now
        console.info('chatd: the server asks for a sync:', String(f.reason).slice(0, 64));
        // A sync under way may have been answered before what this is
        // about: the one that ends it (or the session's first) beats again.
        this.resyncAsked = true;
        if (this.online) this.beat(0);
        break;
      case 'error': {
        const { code, message } = frames.errorText(f);
        this.emit('error', { message: `${code}: ${message}` });
        break;
      }
      default:
        console.debug('chatd: frame ignored', f.op);
    }
  }

  // --- receiving ---

  push(m) {
    this.stats.pushes++;
    const known = this.groups.has(m.gid);
    const g = this.group(m.gid);
    // A group joined since the last sync. The sync may not list it yet (the
    // fan-out can be ahead of the store it reads): ask again while its
    // pushes come, at most once a second.
    if (!g.known && !this.timers.sync) this.syncSoon(known ? 1000 : 200);
    if (!g.known) this.pushedUnlisted(g);
    if (m.msgid <= g.contig || g.buf.has(m.msgid)) {
      this.stats.duplicates++;
      return;
    }
    if (g.known && !g.pulling && !g.retaking && frames.isCursor(m.prev) && m.prev < g.contig) this.unhold(g, m.prev, m.msgid);
    // Up to the head of the last sync the server's count has it already.
    if (!g.opened && m.sender !== this.uid && m.msgid > g.readWant && m.msgid > g.head) {
      g.unread++;
      this.emit('groups');
    }
    if (g.known && !g.pulling && m.prev !== undefined && m.prev === g.contig) {
      this.accept(g, [m]);
      this.drain(g);
      return;
    }
    if (g.known && !g.pulling) this.stats.gaps++;
    // A closed group pulls no gap: what follows one would wait, up to
    // MAX_BUF in every group, until the opening pulls it anyway.
    if (g.known && !g.opened) return; // counted
    if (g.buf.size >= MAX_BUF) return; // counted; pulled later (see MAX_BUF)
    g.buf.set(m.msgid, m);
    this.drain(g);
  }

  // drain accepts the held-back pushes that now follow the contiguous
  // cursor. A gap that remains in the open group is pulled; in a closed
  // one, what waits for it goes (the opening pulls it).
  drain(g) {
    if (!g.known) return;
    const ready = [];
    for (let progressed = true; progressed;) {
      progressed = false;
      for (const [id, m] of g.buf) {
        if (id <= g.contig) {
          g.buf.delete(id);
          this.stats.duplicates++;
        } else if (m.prev !== undefined && m.prev === g.contig) {
          g.buf.delete(id);
          ready.push(m);
          g.contig = id;
          progressed = true;
        }
      }
    }
    this.accept(g, ready);
    if (!g.opened) g.buf.clear(); // a gap of a closed group: the opening pulls what follows it
    if (g.buf.size > 0 && g.opened && !g.pulling && !g.gapping && this.online) this.fillGap(g);
  }

  // fillGap pulls until the held-back pushes connect. A pull that does not
  // close the gap (the store lags its pushes) is repeated with backoff.
  async fillGap(g) {
    g.gapping = true;
    const bo = new Backoff(200, 5000);
    try {
      while (g.buf.size > 0 && g.opened && this.online) {
        try {
          await this.pullForward(g);
        } catch (e) {
          if (!retryable(e)) return this.failed('pull', e);
        }
        if (g.buf.size > 0) await sleep(bo.next());
      }
    } finally {
      g.gapping = false;
    }
  }

  // accept records messages that extend the contiguous cursor, in order:
  // held, unless the newest received are not (g.newerMore, see trim). A
  // message of the outbox leaves it as it is held: one of them arriving
  // while the newest are not brings the view to the newest (toNewest), as
  // the send did, else it left the outbox and was nowhere on screen.
  accept(g, msgs) {
    if (msgs.length === 0) return;
    if (g.newerMore && g.opened && msgs.some((m) => m.sender === this.uid && g.pending.has(m.cmid))) {
      this.toNewest(g.gid).catch((e) => this.failed('newest messages', e));
    }
    let outbox = false;
    const shown = [];
    for (const m of msgs) {
      g.contig = Math.max(g.contig, m.msgid);
      g.head = Math.max(g.head, m.msgid);
      if (sentBefore(g, m)) {
        this.stats.duplicates++;
        continue;
      }
      if (g.newerMore) continue;
      g.msgs.set(m.msgid, m);
      insertSorted(g.order, m.msgid);
      shown.push(m);
      if (m.sender === this.uid && g.pending.delete(m.cmid)) outbox = true;
    }
    this.cursors.received(g, msgs.length);
    if (shown.length > 0) this.emit('messages', { gid: g.gid, msgs: shown, older: false });
    else if (g.newerMore) this.emit('newer', { gid: g.gid });
    if (outbox) this.outbox.changed(g);
    if (!g.opened) this.forgetOld(g, KEEP_CLOSED);
    else this.trim(g);
  }

  // paced sends one of the page's own frames (an ack, read, pull,
  // read_counts, sync or who_read) within the frame budget (pace.js),
  // ahead of those waiting if asked, calling sending as it goes, and
  // resolves with its answer. One refused as over the server's rate
  // empties the budget.
  async paced(frame, ahead = false, sending = null) {
    try {
      return await this.pace.run(() => {
        sending?.();
        return this.conn.request(frame);
      }, ahead);
    } catch (e) {
      if (e.code === 'rate_limited') this.pace.empty();
      throw e;
    }
  }

  failed(what, e) {
    if (e instanceof Disconnected) return; // the next session redoes it
    console.warn(`chatd: ${what}:`, e.message);
    this.emit('error', { message: `${what}: ${e.message}` });
  }
}

Object.assign(Chat.prototype, groups, pulls, recovery, receipts, syncs, views);
