// conn.js: one WebSocket session at a time with chatd's /v1/ws (PROTOCOL.md).
// Requests carry an id and are matched to their answer; a session that
// ends rejects what waits on it and is dialled again with backoff. No
// protocol state lives here: chat.js decides what a new session must redo.

import { frame, errorText, uid } from './frames.js';

// AUTH_TIMEOUT: a connection not authenticated (authed) within this is
// dropped and dialled again with backoff, as the gateway gives a client
// 10 s to send its token.
const AUTH_TIMEOUT = 10000;

// ProtocolError is an error frame's code and message.
export class ProtocolError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
    this.detail = message;
  }
}

// Disconnected: the session ended before the answer came.
export class Disconnected extends Error {}

// Timeout: no answer within the request's time limit.
export class Timeout extends Error {}

// Codes worth retrying unchanged (as the Go SDK's retryable).
export function retryable(err) {
  if (err instanceof Disconnected || err instanceof Timeout) return true;
  return err instanceof ProtocolError &&
    ['unavailable', 'overloaded', 'rate_limited', 'internal'].includes(err.code);
}

// Backoff doubles from min to max; each delay is jittered into [d/2, d].
// sleep resolves after ms.
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Backoff {
  constructor(min = 500, max = 10000) { this.min = min; this.max = max; this.cur = 0; }
  next() {
    this.cur = this.cur === 0 ? this.min : Math.min(2 * this.cur, this.max);
    return Math.round(this.cur / 2 + Math.random() * this.cur / 2);
  }
  reset() { this.cur = 0; }
}

// closeReason is reason cut to the 123 bytes a close frame carries: with a
// longer one, WebSocket.close throws and leaves the connection open.
function closeReason(reason) {
  const enc = new TextEncoder();
  let r = reason.slice(0, 123);
  while (enc.encode(r).length > 123) r = r.slice(0, -1);
  return r;
}

// Conn keeps one session open. Hooks:
//   up(uid)             the server accepted the token: the session is usable
//                       (call healthy() once it has done its first work)
//   down({code, reason, retryIn, wasUp})  the session ended; a redial is due in retryIn ms
//   authFailed(reason)  the server refused the token (close 4001); no redial
//   frame(f)            a frame that answers no request: pushes, receipts, errors
export class Conn {
  constructor(url, token, hooks) {
    this.url = url;
    this.token = token; // a function: the newest token
    this.hooks = hooks;
    this.ws = null;
    this.isUp = false;
    this.stopped = true;
    this.seq = 0;
    this.waiters = new Map();
    this.backoff = new Backoff();
    this.healthyAt = 0; // when the session did its first work (healthy), 0: not yet
    this.timer = 0; // the next dial
    this.authTimer = 0; // the end of the dialled connection's time to authenticate
  }

  start() {
    this.stopped = false;
    this.dial();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    if (ws) {
      this.ended(ws, { code: 1000, reason: 'signed out' });
      ws.close(1000, 'signed out');
    }
  }

  dial() {
    clearTimeout(this.timer);
    if (this.stopped || this.ws) return;
    // The token goes in the first frame: in the URL, the access logs of
    // every proxy on the way keep it.
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = () => {
      if (ws === this.ws) ws.send(JSON.stringify({ op: 'auth', id: String(++this.seq), token: this.token() }));
    };
    ws.onmessage = (ev) => this.received(ws, ev.data);
    ws.onclose = (ev) => this.ended(ws, ev);
    // A server (or a proxy) that lets the connection in and never says
    // authed would leave the page connecting for ever.
    clearTimeout(this.authTimer);
    this.authTimer = setTimeout(() => {
      if (ws === this.ws && !this.isUp) this.drop(`not authenticated within ${AUTH_TIMEOUT / 1000} s`);
    }, AUTH_TIMEOUT);
    ws.onerror = () => {}; // onclose follows and says it
  }

  // retryNow redials at once when no session is open (a click on the
  // banner, the browser coming back online).
  retryNow() {
    if (!this.ws && !this.stopped) {
      this.backoff.reset();
      this.dial();
    }
  }

  // redial dials again after the backoff's next delay: a token renewed
  // after a 4001 that the server refuses again must not be redialled at once.
  redial() {
    if (this.ws || this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.dial(), this.backoff.next());
  }

  // healthy says the session did its first work (chat.js: the sync). The
  // redial after it starts from the shortest delay again once it has
  // lasted the backoff's longest delay, as the Go SDK's does: being let
  // in, or a sync, is not enough, or a server that cuts every client right
  // after its sync (too slow, a pong missed) would be dialled two to four
  // times a second by each of them for ever.
  healthy() { this.healthyAt = Date.now(); }

  // drop ends the session now, without waiting for a closing handshake
  // that a dead network would never finish.
  drop(reason) {
    const ws = this.ws;
    if (!ws) return;
    this.ended(ws, { code: 1006, reason });
    ws.close(1000, closeReason(reason));
  }

  received(ws, data) {
    if (ws !== this.ws) return;
    let f;
    try {
      f = frame(JSON.parse(data));
    } catch {
      console.warn('chatd: a frame that is not JSON was dropped', data.slice(0, 100));
      return;
    }
    if (!f) return;
    if (f.op === 'authed' && !this.isUp) {
      clearTimeout(this.authTimer);
      this.isUp = true;
      // The longest body the server takes, in UTF-8 bytes; 0: it does not
      // say (a server before max_body).
      this.maxBody = Number.isSafeInteger(f.max_body) && f.max_body > 0 ? f.max_body : 0;
      // The most acks and reads a cursors frame may carry; 0: the server
      // does not say (one before the cursors op): a frame a group.
      this.maxCursors = Number.isSafeInteger(f.max_cursors) && f.max_cursors > 0 ? f.max_cursors : 0;
      this.hooks.up(uid(f));
      return;
    }
    const w = f.id && this.waiters.get(f.id);
    if (w) {
      this.waiters.delete(f.id);
      clearTimeout(w.timer);
      if (f.op === 'error') {
        const e = errorText(f);
        w.reject(new ProtocolError(e.code, e.message));
      } else {
        w.resolve(f);
      }
      return;
    }
    if (f.id) {
      // The answer to a request that timed out: it was given up on, and
      // redone where that mattered.
      console.debug('chatd: a late answer dropped', f.op, f.code || '');
      return;
    }
    this.hooks.frame(f);
  }

  ended(ws, ev) {
    if (ws !== this.ws) return;
    this.ws = null;
    clearTimeout(this.authTimer);
    const wasUp = this.isUp;
    this.isUp = false;
    const err = new Disconnected(`disconnected (${ev.code}${ev.reason ? ' ' + ev.reason : ''})`);
    // 1009: the server read a frame over its size limit, the largest one
    // waiting (a message body). Sent again it would end every session.
    let big = null;
    if (ev.code === 1009) {
      for (const w of this.waiters.values()) if (!big || w.size > big.size) big = w;
    }
    for (const w of this.waiters.values()) {
      clearTimeout(w.timer);
      w.reject(w === big ? new ProtocolError('too_large', 'too large for this server (it closed the connection with 1009); shorten it or split it in several messages') : err);
    }
    this.waiters.clear();
    if (ev.code === 4001) {
      this.hooks.authFailed(ev.reason || 'the server refused the token');
      return;
    }
    if (this.stopped) return;
    if (this.healthyAt && Date.now() - this.healthyAt >= this.backoff.max) this.backoff.reset();
    this.healthyAt = 0;
    // A gateway that goes away ends all its sessions at once: the first
    // redial after a session is spread over a fifth of the longest delay
    // (2 s), or its clients would all come back to the others in one wave.
    const retryIn = this.backoff.next() + (wasUp ? Math.round(Math.random() * this.backoff.max / 5) : 0);
    this.timer = setTimeout(() => this.dial(), retryIn);
    this.hooks.down({ code: ev.code, reason: ev.reason, retryIn, wasUp });
  }

  // request sends frame with a fresh id and resolves with its answer; an
  // error frame rejects with a ProtocolError.
  request(frame, timeoutMs = 10000) {
    if (!this.isUp) return Promise.reject(new Disconnected('not connected'));
    const id = String(++this.seq);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(id);
        reject(new Timeout(`no answer to ${frame.op} within ${timeoutMs} ms`));
      }, timeoutMs);
      const data = JSON.stringify({ ...frame, id });
      this.waiters.set(id, { resolve, reject, timer, size: data.length });
      this.ws.send(data);
    });
  }
}
