// pulls.js: the pages of the open group a session asks for: forward from
// the contiguous cursor, older ones before the oldest held, newer ones
// after the newest held when the newest received are not (trim), each
// asked again after a back-off while refused for now. Methods of Chat
// (chat.js), kept apart.

import { Backoff, Disconnected, retryable, sleep } from './conn.js';
import * as frames from './frames.js';
import { insertSorted, KEEP_OPEN, shownAs } from './groups.js';

const PAGE = 100; // a forward pull page
export const OLDER_PAGE = 50; // a page when scrolling up
const PULL_RETRY_MIN = 500; // a pull of the open group refused as retryable is asked again after this,
const PULL_RETRY_MAX = 10000; // twice that while it is refused, up to this

export const pulls = {
  // pullForward pulls everything after the contiguous cursor, page by page.
  // Pushes of the group that do not follow the cursor wait meanwhile. One
  // pull of a group at a time.
  pullForward(g) {
    if (g.pulling) return g.pulling;
    g.pulling = (async () => {
      try {
        for (;;) {
          const after = g.contig;
          this.stats.pulls++;
          const p = frames.page(await this.pullPage(g, { op: 'pull', gid: g.gid, after, limit: PAGE }), g.gid);
          g.head = Math.max(g.head, p.head);
          const fresh = p.msgs.filter((m) => m.msgid > g.contig);
          this.stats.duplicates += p.msgs.length - fresh.length;
          this.accept(g, fresh);
          if (!p.more) return;
          // Pushes taken meanwhile may have overtaken the page: go on from
          // the new cursor. A page with nothing after `after` is the server's.
          if (!p.msgs.some((m) => m.msgid > after)) throw new Error(`pull of ${g.gid} after ${after}: the page says more but brings nothing new`);
        }
      } finally {
        g.pulling = null;
        this.drain(g);
      }
    })();
    return g.pulling;
  },

  // pullPage asks for a page of the open group g, and again after a
  // back-off (PULL_RETRY_MIN doubling to PULL_RETRY_MAX) while the server
  // refuses it as retryable (overloaded, rate_limited, unavailable,
  // internal) or does not answer: given up on, the opening's pages left
  // the group empty, or the view without its older messages, until the
  // user opened it again. A lost session ends it (the next one pulls
  // again), and so does closing the group, and tries refusals.
  async pullPage(g, frame, tries = Infinity) {
    const bo = new Backoff(PULL_RETRY_MIN, PULL_RETRY_MAX);
    for (let n = 1; ; n++) {
      try {
        return await this.paced(frame);
      } catch (e) {
        if (e instanceof Disconnected || !retryable(e) || !g.opened || !this.online || n >= tries) throw e;
        console.info(`chatd: a pull of ${g.gid} refused (${e.message}); asking again`);
      }
      await sleep(bo.next());
    }
  },

  // loadOlder pulls the page right before the oldest message held, and
  // returns how many messages it added: 0 while another is under way
  // (g.loadingOlder, which load waits for), and 0 while nothing is held
  // of a view that opens after g.joinsAfter (Chat.fromRead): the page
  // after it comes first (loadNewer). Paged up from the newest, the view
  // joined onto nothing it held.
  loadOlder(gid) {
    const g = this.group(gid);
    if (g.loadingOlder || !g.olderMore || !this.online) return Promise.resolve(0);
    if (g.order.length === 0 && g.joinsAfter !== null) return Promise.resolve(0);
    g.loadingOlder = this.pullOlder(g).finally(() => { g.loadingOlder = null; });
    return g.loadingOlder;
  },

  async pullOlder(g) {
    const gid = g.gid;
    const before = g.order.length ? g.order[0] : g.contig + 1;
    const dropped = g.dropped;
    this.stats.olderPulls++;
    const p = frames.page(await this.pullPage(g, { op: 'pull', gid, before, limit: OLDER_PAGE }), gid);
    // Closing the group meanwhile (or a trim, or a retake) forgot
    // messages the page may join onto: taken, it could leave a hole.
    // Scrolling up asks again. Pushes taken meanwhile join on above.
    if (g.dropped !== dropped) return 0;
    // A resend written twice whose later record is shown already.
    const fresh = p.msgs.filter((m) => m.msgid < before && !g.msgs.has(m.msgid) && !g.msgs.has(shownAs(g, m)));
    let outbox = false;
    for (const m of fresh) {
      g.msgs.set(m.msgid, m);
      insertSorted(g.order, m.msgid);
      if (m.sender === this.uid && g.pending.delete(m.cmid)) outbox = true;
    }
    if (outbox) this.outbox.changed(g);
    g.olderMore = p.more;
    if (fresh.length > 0) {
      g.olderPages++;
      g.readingOld = true;
    }
    this.emit('messages', { gid, msgs: fresh, older: true });
    this.forgetNewest(g, KEEP_OPEN); // the view is up here
    this.refreshCounts(g, fresh.map((m) => m.msgid));
    return fresh.length;
  },

  // loadNewer is called while the view is at the newest message held: it
  // pulls the page after it when the newest received are not held (trim),
  // and returns how many messages it added; else the view is at the
  // newest, and trimming lets the oldest go again.
  loadNewer(gid) {
    const g = this.group(gid);
    if (g.order.length === 0 && g.joinsAfter === null) g.newerMore = false; // nothing to join onto: what comes is held
    if (!g.newerMore) g.readingOld = false;
    if (!g.newerMore || g.loadingNewer || !this.online) return Promise.resolve(0);
    g.loadingNewer = this.pullNewer(g).finally(() => { g.loadingNewer = null; });
    return g.loadingNewer;
  },

  // pullNewer pulls the page after the newest held, or, nothing held yet,
  // after the msgid the view opened after (Chat.fromRead), asking at most
  // tries times while it is refused.
  async pullNewer(g, tries = Infinity) {
    const gid = g.gid;
    const held = () => (g.order.length > 0 ? g.order[g.order.length - 1] : g.joinsAfter);
    const after = held();
    this.stats.pulls++;
    const p = frames.page(await this.pullPage(g, { op: 'pull', gid, after, limit: PAGE }, tries), gid);
    // What the page joins onto went meanwhile (closed, retaken): scrolling
    // down asks again.
    if (!g.newerMore || held() !== after) return 0;
    g.head = Math.max(g.head, p.head);
    const fresh = [];
    for (const m of p.msgs) {
      if (m.msgid <= after || m.msgid > g.contig) continue;
      const first = shownAs(g, m);
      if (first !== undefined && first < m.msgid) continue; // a resend written twice, taken as one
      g.msgs.set(m.msgid, m);
      insertSorted(g.order, m.msgid);
      fresh.push(m);
    }
    this.emit('messages', { gid, msgs: fresh, older: false, newer: true });
    this.refreshCounts(g, fresh.map((m) => m.msgid));
    this.forgetOld(g, KEEP_OPEN); // scrolled down past them
    // Back at the contiguous cursor: what the page has past it is new (a
    // page follows its after), and pushes join on.
    if (p.msgs.some((m) => m.msgid >= g.contig)) {
      g.newerMore = false;
      g.readingOld = false;
      this.accept(g, p.msgs.filter((m) => m.msgid > g.contig));
    }
    return fresh.length;
  },
};
