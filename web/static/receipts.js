// receipts.js: the read counts of my messages, pushed (receipts frames)
// or asked for (read_counts), and who read one. Methods of Chat (chat.js),
// kept apart.

import * as frames from './frames.js';
import { WHO_READ_PER } from './pace.js';

export const MAX_COUNTS = 200; // msgids per read_counts (protocol.MaxMsgIDs)

export const receipts = {
  // receipts takes the read counts of g's messages that it holds or that
  // may yet come (past the contiguous cursor), at most MAX_COUNTS of
  // these: a count of any other is asked again when its message is shown
  // (refreshCounts), and kept, counts of msgids that never come piled up.
  receipts(gid, cs) {
    const g = this.group(gid);
    const counts = frames.counts(cs).filter((c) => g.msgs.has(c.msgid) || c.msgid > g.contig);
    for (const c of counts) {
      const old = g.counts.get(c.msgid);
      if (!old || c.read >= old.read) g.counts.set(c.msgid, c);
    }
    // Only a count of a msgid not held can pass the bound (a message let
    // go takes its count with it).
    if (counts.some((c) => !g.msgs.has(c.msgid))) {
      const ahead = [...g.counts.keys()].filter((id) => !g.msgs.has(id)).sort((a, b) => a - b);
      for (const id of ahead.slice(MAX_COUNTS)) g.counts.delete(id);
    }
    this.emit('counts', { gid, counts });
  },

  // refreshCounts asks the read counts of my messages among msgids (the
  // newest `newest` of them): after opening, paging up and reconnecting
  // (receipts pushes are best effort).
  async refreshCounts(g, msgids, newest = Infinity) {
    const mine = msgids.filter((id) => g.msgs.get(id)?.sender === this.uid).slice(-newest);
    for (let i = 0; i < mine.length; i += MAX_COUNTS) {
      try {
        const f = await this.paced({ op: 'read_counts', gid: g.gid, msgids: mine.slice(i, i + MAX_COUNTS) });
        this.receipts(g.gid, f.counts);
      } catch (e) {
        return this.failed('read counts', e);
      }
    }
  },

  async whoRead(gid, msgid) {
    const f = await this.paced({ op: 'who_read', gid, msgid });
    const read = frames.names(f.read);
    const unread = frames.names(f.unread);
    this.pace.charge(Math.floor((read.length + unread.length) / WHO_READ_PER));
    return { read, unread };
  },
};
