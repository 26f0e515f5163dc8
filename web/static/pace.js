// pace.js: the budget of the page's own frames (acks, reads, pulls, read
// counts, syncs, who read; sends have their own window, outbox.js), as
// the Go SDK's (client/pace.go): a token bucket of RATE a second up to
// BURST, and at most INFLIGHT answers awaited at once. A
// gateway allows a connection 200 frames a second (bursts of 400) and
// refuses those over it as rate_limited, whatever they are: the page's
// own kept to half of it leave the user's sends room, and a page with
// hundreds of groups to ack or a session to redo does not send them all
// in one burst. Waiters go first in, first out, but for one that asks to
// go ahead (a session's first sync, see Chat.sync).

const RATE = 100; // frames a second
const BURST = 20;
const INFLIGHT = 6;
// What the gateway charges an answer beyond its request's frame
// (gateway/receipts.go, extraFrames): a frame for each SYNC_PER groups a
// sync lists, for each WHO_READ_PER ids who read lists, and for each
// CURSORS_PER acks and reads a cursors frame carries.
export const SYNC_PER = 100;
export const WHO_READ_PER = 500;
export const CURSORS_PER = 100;

export class Pacer {
  constructor(rate = RATE, burst = BURST, inflight = INFLIGHT) {
    this.rate = rate;
    this.burst = burst;
    this.max = inflight;
    this.tokens = burst;
    this.last = performance.now();
    this.busy = 0;
    this.queue = [];
    this.timer = 0;
  }

  // run calls fn (which sends one frame and resolves with its answer)
  // once the budget allows, and resolves or rejects as it does. One ahead
  // goes before those waiting.
  async run(fn, ahead = false) {
    await new Promise((resolve) => {
      if (ahead) this.queue.unshift(resolve);
      else this.queue.push(resolve);
      this.pump();
    });
    try {
      return await fn();
    } finally {
      this.busy--;
      this.pump();
    }
  }

  // charge takes n frames more from the budget, into debt if need be: an
  // answer the server charged as several frames (a sync, one more for
  // each SYNC_PER groups it lists; who read, one more for each WHO_READ_PER
  // ids), or a request (a cursors frame, one more for each CURSORS_PER
  // entries), so that what follows keeps to the server's rate.
  charge(n) {
    if (n <= 0) return;
    this.refill();
    this.tokens -= n;
  }

  // empty drops the tokens there are: the server refused a frame as over
  // its rate, so the bucket starts again from none.
  empty() {
    this.refill();
    this.tokens = Math.min(this.tokens, 0);
  }

  refill() {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + (now - this.last) / 1000 * this.rate);
    this.last = now;
  }

  pump() {
    clearTimeout(this.timer);
    this.timer = 0;
    while (this.queue.length > 0 && this.busy < this.max) {
      this.refill();
      if (this.tokens < 1) {
        this.timer = setTimeout(() => this.pump(), Math.ceil((1 - this.tokens) / this.rate * 1000));
        return;
      }
      this.tokens--;
      this.busy++;
      this.queue.shift()();
    }
  }
}
