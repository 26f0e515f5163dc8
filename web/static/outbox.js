// outbox.js: the messages the user sent that the group does not show yet.
// Each keeps the cmid it was given: a send that times out, or whose
// connection drops, is sent again with it, so the group gets one message
// however many sends it took. The outbox survives a reload of the tab
// (sessionStorage); the entry of a message goes when the message arrives.

import { ProtocolError, Disconnected, Timeout, retryable } from './conn.js';

const SEND_TIMEOUT = 10000;

// newCmid uses crypto.getRandomValues, not randomUUID: the page may be
// served over plain http from another host than localhost.
function newCmid() {
  return `w-${Array.from(crypto.getRandomValues(new Uint8Array(12)), (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

export class Outbox {
  constructor(chat) { this.chat = chat; }

  key() { return `chatd.outbox.${this.chat.uid}`; }

  restore() {
    for (const p of JSON.parse(sessionStorage.getItem(this.key()) || '[]')) {
      this.chat.group(p.gid).pending.set(p.cmid, { ...p, state: 'sending', attempts: 0 });
    }
  }

  send(gid, body) {
    const g = this.chat.group(gid);
    const p = { gid, cmid: newCmid(), body, state: 'sending', attempts: 0 };
    g.pending.set(p.cmid, p);
    this.changed(g);
    this.trySend(p);
  }

  retry(gid, cmid) {
    const g = this.chat.group(gid);
    const p = g.pending.get(cmid);
    if (p && p.state === 'failed') {
      p.state = 'sending';
      this.changed(g);
      this.trySend(p);
    }
  }

  // resendAll is called by each new session.
  resendAll() {
    for (const g of this.chat.groups.values()) {
      for (const p of g.pending.values()) this.trySend(p);
    }
  }

  // trySend sends p. A timeout sends it again at once, a retryable refusal
  // after a pause, a lost connection on the next session; the server
  // answers a resend with the first send's msgid.
  async trySend(p) {
    const chat = this.chat;
    if (p.inflight || !chat.online || p.state !== 'sending') return;
    const g = chat.group(p.gid);
    p.inflight = true;
    if (p.attempts++ > 0) chat.stats.resends++;
    let again = -1;
    try {
      const f = await chat.conn.request({ op: 'send', gid: p.gid, cmid: p.cmid, body: p.body }, SEND_TIMEOUT);
      chat.stats.sends++;
      p.msgid = f.msgid;
      p.state = 'sent';
      // Held, or below the contiguous cursor (another device of the user
      // acked past it): the group has it, by scrolling up if not on screen.
      if (g.msgs.has(f.msgid) || f.msgid <= g.contig) g.pending.delete(p.cmid);
      this.changed(g);
      // It arrives by push; if that push is lost and nothing follows it,
      // pull it.
      setTimeout(() => {
        if (g.contig < f.msgid && g.opened && chat.online) chat.pullForward(g).catch((e) => chat.failed('pull', e));
      }, 2000);
    } catch (e) {
      if (e instanceof Timeout) {
        again = 0;
      } else if (e instanceof ProtocolError && retryable(e)) {
        // longer while it repeats, jittered so that clients refused
        // together do not all come back together
        again = Math.round(1000 * Math.min(p.attempts, 10) * (0.5 + Math.random() / 2));
      } else if (!(e instanceof Disconnected)) {
        p.state = 'failed';
        p.error = e.detail || e.message;
        this.changed(g);
      }
    } finally {
      p.inflight = false;
    }
    if (again >= 0) setTimeout(() => this.trySend(p), again);
  }

  changed(g) {
    const all = [];
    for (const gr of this.chat.groups.values()) {
      for (const p of gr.pending.values()) {
        if (p.state !== 'failed') all.push({ gid: p.gid, cmid: p.cmid, body: p.body });
      }
    }
    sessionStorage.setItem(this.key(), JSON.stringify(all));
    this.chat.emit('pending', { gid: g.gid });
  }
}
