// cursors.js: acks and reads, batched. A group's ack goes out once 10
// messages arrived or 1 s after the first of them, whichever comes first;
// its read 1 s after the user first saw a message. Both only ever name the
// contiguous cursor or below (never past a message not received), acks
// before reads, and the server keeps only the newest: a lost one is simply
// sent again later. One refused as beyond_head names no message of the
// group (the server checks its log): it is not sent again, and the group
// is taken up again from the server's cursor (Chat.retake). A server
// that says max_cursors in its authed frame takes the acks and reads of
// many groups in one cursors frame: the due ones go in as few as its
// limit and frame size allow, each charged to the page's budget as the
// gateway charges it, and each refused entry is handled as its one-group
// frame's refusal. A server before the op gets a frame a group.

import { retryable, ProtocolError } from './conn.js';
import { CURSORS_PER } from './pace.js';
import * as frames from './frames.js';

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
      // In cursors frames, the acks and reads due within half an interval
      // go with those due now: early, they cost nothing more.
      const batched = this.chat.conn.maxCursors > 0;
      const now = Date.now() + (batched ? INTERVAL / 2 : 0);
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
      if (batched) {
        await this.sendBatched([...acks.map(([g, upto]) => ['ack', g, upto]), ...reads.map(([g, upto]) => ['read', g, upto])]);
      } else {
        await Promise.all(acks.map(([g, upto]) => this.send('ack', g, upto)));
        await Promise.all(reads.map(([g, upto]) => this.send('read', g, upto)));
      }
    } finally {
      this.flushing = false;
      this.schedule();
    }
  }

  async send(op, g, upto) {
    try {
      await this.chat.paced({ op, gid: g.gid, upto });
    } catch (e) {
      return this.settle(op, g, upto, e);
    }
    this.settle(op, g, upto, null);
  }

  // sendBatched sends entries ([op, g, upto]) in cursors frames of at most
  // the server's max_cursors entries, within its frame limit (six times
  // its body limit and 4 KiB).
  async sendBatched(entries) {
    const conn = this.chat.conn;
    const room = 6 * (conn.maxBody || 16384) + 4096 - 512;
    const batches = [];
    let cur = [];
    let size = 0;
    for (const e of entries) {
      const n = 45 + e[1].gid.length; // {"gid":"…","upto":…}, gids are ASCII
      if (cur.length > 0 && (cur.length === conn.maxCursors || size + n > room)) {
        batches.push(cur);
        cur = [];
        size = 0;
      }
      cur.push(e);
      size += n;
    }
    if (cur.length > 0) batches.push(cur);
    await Promise.all(batches.map((b) => this.sendFrame(b)));
  }

  // sendFrame sends entries in one cursors frame, charged to the budget
  // one frame and one more per CURSORS_PER entries, as the gateway
  // charges it, and settles each as its answer says.
  async sendFrame(entries) {
    const chat = this.chat;
    const acks = [];
    const reads = [];
    for (const [op, g, upto] of entries) (op === 'ack' ? acks : reads).push({ gid: g.gid, upto });
    const frame = { op: 'cursors' };
    if (acks.length > 0) frame.acks = acks;
    if (reads.length > 0) frame.reads = reads;
    let f;
    try {
      f = await chat.paced(frame, false, () => chat.pace.charge(Math.floor(entries.length / CURSORS_PER)));
    } catch (e) {
      // Refused whole: retried as each entry would be, or reported once.
      if (!retryable(e)) return chat.failed('cursors', e);
      for (const [op, g, upto] of entries) this.settle(op, g, upto, e);
      return;
    }
    const refused = frames.refused(f.refused);
    for (const [op, g, upto] of entries) {
      const r = refused.get(`${op} ${g.gid}`);
      this.settle(op, g, upto, r ? new ProtocolError(r.code, r.message) : null);
    }
  }

  // settle records the answer to op of g up to upto: taken (e null), or
  // refused with e.
  settle(op, g, upto, e) {
    const chat = this.chat;
    if (!e) {
      chat.retakeEnded(g);
      if (op === 'ack') {
        chat.stats.acks++;
        g.ack = Math.max(g.ack, upto);
      } else {
        chat.stats.reads++;
        g.read = Math.max(g.read, upto);
        if (!g.opened) chat.syncSoon(); // its badge counted what this read
      }
      return;
    }
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
