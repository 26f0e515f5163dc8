// sync.js: a session's sync, which asks every group's cursors, head and
// unread count (never their messages), within the frame budget. Methods
// of Chat (chat.js), kept apart.

import * as frames from './frames.js';
import { SYNC_PER } from './pace.js';

export const syncs = {
  syncSoon(delay = 200) {
    clearTimeout(this.timers.sync);
    this.timers.sync = setTimeout(() => {
      this.timers.sync = 0;
      if (this.online) this.sync().catch((e) => this.failed('sync', e));
    }, delay);
  },

  // sync asks every group's cursors and counts within the frame budget
  // (resync after resync went past the gateway's rate). One asked while
  // another waits its turn is that one: its answer comes after both. The
  // session's first (ahead) joins none and goes before what waits: until
  // it is answered the page is "connecting…" and sends nothing else of
  // its own, and what waits was queued before the connection was lost (a
  // flush of 300 acks is 3 s), redone anyway once online. It still takes
  // a token, so the budget holds: at most 1/RATE's wait.
  sync(ahead = false) {
    if (this.syncWaiting && !ahead) return this.syncWaiting;
    const p = this.syncOnce(ahead, () => {
      if (this.syncWaiting === p) this.syncWaiting = null;
    });
    this.syncWaiting = p;
    return p;
  },

  // syncOnce sends one sync, calling sent as it goes out (or fails to),
  // and takes its answer.
  async syncOnce(ahead, sent) {
    let f;
    try {
      f = await this.paced({ op: 'sync' }, ahead, () => {
        this.stats.syncs++;
        sent();
      });
    } finally {
      sent();
    }
    const groups = frames.groups(f.groups);
    this.pace.charge(Math.floor(groups.length / SYNC_PER));
    for (const gs of groups) {
      const g = this.group(gs.gid);
      if (!g.known) {
        // First sight: what the user received before (elsewhere, earlier)
        // is below the ack cursor, loaded by scrolling up.
        this.listed(g);
        g.contig = Math.max(g.contig, gs.ack);
        g.readWant = Math.max(g.readWant, gs.read);
      }
      g.head = Math.max(g.head, gs.head);
      g.ack = Math.max(g.ack, gs.ack);
      g.read = Math.max(g.read, gs.read);
      g.left = !!gs.left;
      if (!g.opened) {
        // The server's count lags its pushes by the persister's delay.
        let seen = 0;
        for (const m of [...g.msgs.values(), ...g.buf.values()]) {
          if (m.msgid > gs.read && m.sender !== this.uid) seen++;
        }
        g.unread = Math.max(gs.unread, seen);
        g.unreadExact = gs.unread_exact;
      }
      this.drain(g);
    }
    this.forgetUnnamed(new Set(groups.map((gs) => gs.gid)));
    this.emit('groups');
    return groups;
  },
};
