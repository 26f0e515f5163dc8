// recovery.js: how the page gets over a server that handed it a msgid the
// group does not have: a push whose prev passes over a held msgid takes it
// off (unhold); a cursor refused as beyond_head takes the group up again
// from the confirmed ack (retake). Methods of Chat (chat.js), kept apart.

import { Backoff, sleep } from './conn.js';

const RETAKE_MIN = 1000; // a group taken up again twice in a row waits this before its sync and pull,
const RETAKE_MAX = 60000; // twice that at each further time, up to this

// retakeBackoff is a group's wait between retakes in a row.
export const retakeBackoff = () => new Backoff(RETAKE_MIN, RETAKE_MAX);

export const recovery = {
  // unhold forgets the messages g holds after prev and before msgid: the
  // push of msgid says the group has none there, so they are another
  // group's (of the same partition), taken from a push whose prev matched
  // or from a page. Kept, they stayed on screen, and the cursor past them
  // made the push wait for a pull. The cursor goes back to the newest
  // message held before them; with none, to the ack or prev, the lower.
  unhold(g, prev, msgid) {
    const gone = g.order.filter((id) => id > prev && id < msgid);
    if (gone.length === 0) return;
    console.warn(`chatd: ${g.gid}: ${gone.join(', ')} taken off: the group's message after ${prev} is ${msgid}`);
    g.order.splice(g.order.length - gone.length);
    g.dropped++;
    for (const id of gone) {
      g.msgs.delete(id);
      g.counts.delete(id);
    }
    g.contig = g.order.length ? g.order[g.order.length - 1] : Math.min(prev, g.ack);
    g.newerMore = false; // held ones end at the cursor
    g.readWant = Math.max(g.read, Math.min(g.readWant, g.contig));
    this.emit('forgotten', { gid: g.gid, msgids: gone });
    if (!g.opened) this.syncSoon(); // the badge counted them
  },

  // retake takes g up again from the ack cursor the server confirmed, as a
  // new page would, once it refused an ack or read of g up to the
  // contiguous cursor as beyond_head: it has no such message in g. A
  // pushed msgid it does not have, whose prev matched, was taken (nothing
  // tells it from a real one); kept, it had every later message dropped as
  // held already, and its cursors refused, for the life of the page. What
  // was received past that cursor is forgotten and pulled again: nothing
  // is lost, as nothing was acked past it. A server that serves that msgid
  // again has g taken up again and again: from the second time in a row
  // the sync and pull wait, longer each time (RETAKE_MIN doubling up to
  // RETAKE_MAX), and the page says so, once, until a cursor of g is taken.
  async retake(g) {
    if (g.retaking) {
      g.retakeAgain = true; // refused past what this one took up again
      return;
    }
    g.retaking = true;
    try {
      do {
        g.retakeAgain = false;
        while (g.pulling) await g.pulling.catch(() => {});
        const gone = g.order.filter((id) => id > g.ack);
        g.order.splice(g.order.length - gone.length);
        g.dropped++; // the contiguous cursor moves back, with or without messages held
        for (const id of gone) {
          g.msgs.delete(id);
          g.counts.delete(id);
        }
        g.buf.clear();
        // Nothing held of a view that opens after joinsAfter (Chat.fromRead),
        // its page under way or lost: it opens there still, the newest not
        // held. Joined onto the ack instead, it was read past what lay
        // between.
        const opening = g.order.length === 0 && g.joinsAfter !== null && g.joinsAfter <= g.ack;
        if (g.order.length === 0 && !opening) g.joinsAfter = null;
        g.contig = g.order.length ? g.order[g.order.length - 1] : g.ack; // held ones join on
        g.newerMore = opening;
        g.head = g.ack; // the sync says the server's
        g.readWant = Math.max(g.read, Math.min(g.readWant, g.contig));
        g.unacked = 0;
        g.ackDue = 0;
        this.emit('forgotten', { gid: g.gid, msgids: gone });
        if (g.retaken++ === 0) {
          console.warn(`chatd: ${g.gid}: cursors refused as beyond the group's head; taken up again after ${g.ack}`);
        } else {
          const wait = g.retakeBackoff.next();
          if (g.retaken === 2) {
            const message = `${g.gid}: the server keeps sending messages it then refuses as beyond the group's head; ` +
              `asking again less often, up to once a minute`;
            console.warn(`chatd: ${message}`);
            this.emit('error', { message });
          }
          await sleep(wait);
        }
        await this.sync(); // the head, the badge, cursors moved elsewhere
        if (g.opened) await this.pullForward(g);
      } while (g.retakeAgain);
    } catch (e) {
      this.failed(`retake ${g.gid}`, e);
    } finally {
      g.retaking = false;
    }
  },

  // retakeEnded: the server took a cursor of g; the next retake is at once.
  retakeEnded(g) {
    g.retaken = 0;
    g.retakeBackoff.reset();
  },
};
