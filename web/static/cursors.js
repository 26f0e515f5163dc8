// cursors.js: acks and reads, batched. A group's ack goes out once 10
// messages arrived or 1 s after the first of them, whichever comes first;
// its read 1 s after the user first saw a message. Both only ever name the
// contiguous cursor or below (never past a message not received), acks
// before reads, and the server keeps only the newest: a lost one is simply
// sent again later. One refused as beyond_head names no message of the
// group (the server checks its log): it is not sent again, and the group
// is taken up again from the server's cursor (Chat.retake).

import { retryable } from './conn.js';

const ACK_EVERY = 10;
const INTERVAL = 1000;

export class Cursors {
  constructor(chat) {
    this.chat = chat;
    this.timer = 0;
    this.due = Infinity; // when the timer fires
    this.flushing = false;
  }

  stop() {
    clearTimeout(this.timer);
    this.due = Infinity;
  }

  // received counts n messages that extended g's contiguous cursor.
  received(g, n) {
    g.unacked += n;
    if (g.unacked >= ACK_EVERY) g.ackDue = Date.now();
    else if (!g.ackDue) g.ackDue = Date.now() + INTERVAL;
    this.schedule(g);
  }

  // seen records that the user has seen g up to msgid.
  seen(g, msgid) {
    if (msgid > g.contig || msgid <= g.readWant) return;
    g.readWant = msgid;
    if (!g.readDue) g.readDue = Date.now() + INTERVAL;
    this.schedule(g);
  }

  // schedule has flush run when the earliest ack or read falls due. Told
  // of one group, whose ack or read came due, it only brings the timer
  // forward to it: a look at every group for every message received cost
  // a user in thousands of groups that much per message.
  schedule(g) {
    let due = Infinity;
    if (g) {
      due = Math.min(g.ackDue || Infinity, g.readDue || Infinity);
      if (due >= this.due) return;
    } else {
      for (const h of this.chat.groups.values()) {
        if (h.ackDue) due = Math.min(due, h.ackDue);
        if (h.readDue) due = Math.min(due, h.readDue);
      }
    }
    clearTimeout(this.timer);
    this.due = due;
    if (due < Infinity) {
      this.timer = setTimeout(() => {
        this.due = Infinity;
        this.flush(false);
      }, Math.max(0, due - Date.now()));
    }
  }

  // flush sends the acks, then the reads, that are due (every pending one
  // when all is set) and waits for their answers.
  async flush(all) {
    if (this.flushing || !this.chat.online) return;
    this.flushing = true;
    try {
      const now = Date.now();
      const acks = [];
      const reads = [];
      for (const g of this.chat.groups.values()) {
        if (g.contig > g.ack && (all || g.ackDue && now >= g.ackDue)) {
          acks.push([g, g.contig]);
          g.unacked = 0;
          g.ackDue = 0;
        } else if (g.contig <= g.ack) {
          g.unacked = 0;
          g.ackDue = 0;
        }
        const upto = Math.min(g.readWant, g.contig);
        if (upto > g.read && (all || g.readDue && now >= g.readDue)) {
          reads.push([g, upto]);
          g.readDue = 0;
        } else if (upto <= g.read) {
          g.readDue = 0; // read already, here or on another device
        }
      }
      await Promise.all(acks.map(([g, upto]) => this.send('ack', g, upto)));
      await Promise.all(reads.map(([g, upto]) => this.send('read', g, upto)));
    } finally {
      this.flushing = false;
      this.schedule();
    }
  }

  async send(op, g, upto) {
    const chat = this.chat;
    try {
      await chat.paced({ op, gid: g.gid, upto });
      chat.retakeEnded(g);
      if (op === 'ack') {
        chat.stats.acks++;
        g.ack = Math.max(g.ack, upto);
      } else {
        chat.stats.reads++;
        g.read = Math.max(g.read, upto);
        if (!g.opened) chat.syncSoon(); // its badge counted what this read
      }
    } catch (e) {
      if (e.code === 'beyond_head') {
        if (upto <= g.contig) chat.retake(g); // else taken up again already
        return;
      }
      if (!retryable(e)) return chat.failed(op, e);
      const due = Date.now() + INTERVAL;
      if (op === 'ack') g.ackDue ||= due;
      else g.readDue ||= due;
    }
  }
}
