// outbox.js: the messages the user sent that the group does not show yet.
// Each keeps the cmid it was given: a send that times out, or whose
// connection drops, is sent again with it, so the group gets one message
// however many sends it took. The outbox survives a reload of the tab
// (sessionStorage); the entry of a message goes when the message arrives.
//
// A group's sends go out one at a time, first in first out: the next
// waits until the one before is accepted (or failed for good), so the
// group stores them in the order they were typed, however often one is
// refused or resent. A refusal as overloaded pauses every send of the
// page, as the Go SDK does: 0.25 to 0.5 s at first, twice that while the
// refusals go on, up to 5 to 10 s. At most MAX_SENDING groups have a
// send in flight at once.

import { ProtocolError, Disconnected, Timeout, Backoff, retryable } from './conn.js';

const SEND_TIMEOUT = 10000;
const utf8 = new TextEncoder();
const MAX_SENDING = 8; // sends in flight at once, of all groups: a new session's resends of many groups wait their turn

// newCmid uses crypto.getRandomValues, not randomUUID: the page may be
// served over plain http from another host than localhost.
function newCmid() {
  return `w-${Array.from(crypto.getRandomValues(new Uint8Array(12)), (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

export class Outbox {
  constructor(chat) {
    this.chat = chat;
    this.pause = new Backoff(500, 10000); // after overloaded: all sends wait
    this.pausedUntil = 0;
    this.episode = 0; // pauses so far: a refusal of a send made before the last one began does not lengthen it
    this.timer = 0;
    this.inflight = 0;
  }

  key() { return `chatd.outbox.${this.chat.uid}`; }

  restore() {
    for (const p of JSON.parse(sessionStorage.getItem(this.key()) || '[]')) {
      this.chat.group(p.gid).pending.set(p.cmid, { ...p, state: 'sending', attempts: 0 });
    }
  }

  stop() { clearTimeout(this.timer); }

  send(gid, body) {
    const g = this.chat.group(gid);
    const p = { gid, cmid: newCmid(), body, state: 'sending', attempts: 0 };
    g.pending.set(p.cmid, p);
    this.changed(g);
    this.pump(g);
  }

  // retry sends a failed message again, after those waiting now.
  retry(gid, cmid) {
    const g = this.chat.group(gid);
    const p = g.pending.get(cmid);
    if (p && p.state === 'failed') {
      p.state = 'sending';
      g.pending.delete(cmid);
      g.pending.set(cmid, p);
      this.changed(g);
      this.pump(g);
    }
  }

  // resendAll sends what waits in every group: at each new session, at
  // the end of a pause, and when a place among MAX_SENDING frees.
  resendAll() {
    for (const g of this.chat.groups.values()) this.pump(g);
  }

  // pump sends g's oldest message waiting to be sent, unless one of g is
  // under way, the sends are paused, or the page is offline.
  pump(g) {
    const chat = this.chat;
    if (g.sending || g.sendWait || !chat.online || this.inflight >= MAX_SENDING) return;
    const wait = this.pausedUntil - Date.now();
    if (wait > 0) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.resendAll(), wait);
      return;
    }
    for (const p of g.pending.values()) {
      if (p.state === 'sending') {
        this.trySend(g, p);
        return;
      }
    }
  }

  // trySend sends p, g's oldest message waiting. A timeout or a retryable
  // refusal sends it again after a pause, a lost connection on the next
  // session; the server answers a resend with the first send's
  // msgid. The next of g goes once p is accepted or failed.
  async trySend(g, p) {
    const chat = this.chat;
    g.sending = p;
    this.inflight++;
    if (p.attempts++ > 0) chat.stats.resends++;
    const episode = this.episode;
    let again = 0; // ms until g's next send; -1: the next session's
    try {
      // A body over the server's limit is refused here, unsent: a frame
      // past the server's frame limit would close the connection (1009).
      const size = utf8.encode(p.body).length;
      const max = chat.conn.maxBody;
      if (max && size > max) throw new ProtocolError('body_too_large', `too large: ${size} bytes, and this server takes at most ${max}; shorten it or split it in several messages`);
      const f = await chat.conn.request({ op: 'send', gid: p.gid, cmid: p.cmid, body: p.body }, SEND_TIMEOUT);
      chat.stats.sends++;
      this.pause.reset();
      g.sendBackoff?.reset();
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
      if (e instanceof Disconnected) {
        again = -1;
      } else if (e instanceof ProtocolError && e.code === 'overloaded') {
        if (episode === this.episode) {
          this.episode++;
          this.pausedUntil = Date.now() + this.pause.next();
        }
        // pump waits for the pause
      } else if ((e instanceof ProtocolError && retryable(e)) || e instanceof Timeout) {
        // longer while it repeats, jittered so that clients refused
        // together (or a server too slow to answer) do not all come back
        // together
        g.sendBackoff ||= new Backoff(1000, 10000);
        again = g.sendBackoff.next();
      } else {
        p.state = 'failed';
        p.error = e.detail || e.message;
        this.changed(g); // and the next one goes
      }
    } finally {
      g.sending = null;
      this.inflight--;
    }
    if (again > 0) {
      g.sendWait = setTimeout(() => { g.sendWait = 0; this.pump(g); }, again);
    } else if (again === 0) {
      this.pump(g);
    }
    this.resendAll(); // a place is free: the groups that wait for one
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
