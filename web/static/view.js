// view.js: the open group's view: opening it where its user left off
// (the first unread message, however far up), paging up to it, bringing
// it to the newest at the user's word, and what of it may be read: only
// what was on screen, and never past unread messages above it. Methods
// of Chat (chat.js), kept apart.

import { Disconnected, retryable } from './conn.js';
import { readMark } from './groups.js';
import { OLDER_PAGE } from './pulls.js';
import { MAX_COUNTS } from './receipts.js';

const FILL = 30; // an opened group shows at least this many messages when it has them
const UNREAD_PAGES = 20; // an opened group pages up at most this many older pages to its first unread message; further, it opens there (fromRead)
const FROM_READ_TRIES = 3; // the page after the read cursor refused this often, the view goes to the newest (fromRead)
export const KEEP_CLOSED = 200; // messages kept of a group that is not open; older ones come back by scrolling up

export const views = {
  async open(gid) {
    if (this.current && this.current !== gid) this.closeGroup(this.current);
    const g = this.group(gid);
    this.current = gid;
    g.opened = true;
    g.atNewest = false;
    // The badge's count, a lower bound: one not exact counts a window
    // trimmed above the read cursor, past one message at least (the
    // server's window, 1,000 by default, counts 1000 of 2,990).
    const unread = g.unread + (g.unreadExact ? 0 : 1);
    g.unread = 0;
    g.readingOld = false;
    this.emit('groups');
    if (this.online) await this.load(g, unread); // else the next session does
  },

  // load pulls what follows the cursor of the open group g, pages up until
  // the view has FILL messages and reaches back to the first unread one
  // (another device may have acked far past the read cursor: opened at its
  // newest, the view would be read past what was never on screen), and
  // asks the read counts of mine. Past UNREAD_PAGES pages up, the first
  // unread is further: the view opens there instead (fromRead), at once
  // when the badge's count of unread messages (unread, at the opening; a
  // lower bound) says so, rather than after paging up that far for nothing.
  async load(g, unread = 0) {
    g.olderPages = 0;
    const received = g.contig; // before this opening
    await this.pullForward(g);
    // The page after the read cursor went with the last session (fromRead,
    // nothing held yet): it is asked again. Paged up from the newest
    // instead, the view still joined onto the read cursor, and was read
    // past the unread messages between.
    if (g.order.length === 0 && g.joinsAfter !== null) await (g.loadingNewer || this.loadNewer(g.gid));
    // The user brought the view to the newest (toNewest): a reconnect
    // keeps it there. Paged up to the first unread again, the view the
    // user chose went.
    if (g.atNewest) return this.refreshCounts(g, g.order, MAX_COUNTS);
    // Unread messages received before (acked, by another device perhaps)
    // and not held: the forward pull brought the rest, and a trim keeps
    // the first of those.
    const read = readMark(g);
    const above = received > read ? unread - g.order.filter((id) => id > read).length : 0;
    if (g.opened && !this.reachesRead(g) && above > UNREAD_PAGES * OLDER_PAGE) {
      await this.fromRead(g);
    } else {
      await this.pageUp(g, () => g.atNewest || (g.order.length >= FILL && (this.reachesRead(g) || g.olderPages >= UNREAD_PAGES)));
      if (g.opened && !g.atNewest && !this.reachesRead(g)) await this.fromRead(g);
    }
    await this.refreshCounts(g, g.order, MAX_COUNTS);
  },

  // fromRead makes the view of the open group g the page after its read
  // cursor: the first unread message is more than UNREAD_PAGES pages up
  // from the newest (another device acked them unread). What is held goes,
  // and the newest are not held (newerMore): scrolling down pulls them,
  // page by page, as the user reads. Opened at the newest, the view was
  // read as it was, past every older unread message never on screen.
  // Refused FROM_READ_TRIES times, the page gives way to the newest.
  async fromRead(g) {
    const after = readMark(g);
    this.forgetOld(g, 0);
    g.newerMore = true;
    g.readingOld = true;
    g.olderPages = 0;
    g.joinsAfter = after;
    try {
      await this.pullNewer(g, FROM_READ_TRIES);
    } catch (e) {
      if (e instanceof Disconnected || !retryable(e) || !g.newerMore || g.order.length > 0 || g.joinsAfter !== after) throw e;
      // History that far up is unavailable for now (ClickHouse down, or
      // lacking what Redis let go): the view goes to the newest, which
      // Redis holds, reading nothing above it, rather than stay empty
      // while the page is asked again and again. The user is told.
      this.failed(`the first unread message of ${g.gid}`, e);
      await this.toNewest(g.gid);
    }
  },

  // pageUp pages the open group g up until enough() holds, or nothing
  // older is left.
  async pageUp(g, enough) {
    while (g.olderMore && g.opened && !enough()) {
      if (g.loadingOlder) { // one the user's scrolling (or reconnect) started
        await g.loadingOlder.catch(() => {});
        continue;
      }
      if ((await this.loadOlder(g.gid)) === 0) break;
    }
  },

  // toNewest brings the view of the open group to its newest messages
  // when they are not held (trim): the user sent one, which shows below
  // them, or asked for them (the page's "new messages"). The window held goes (an older or newer page under way with
  // it), and the view is made again of what precedes the contiguous
  // cursor, FILL messages, as at an opening but without paging up to the
  // read cursor: paged up that far, the window let the newest go again.
  // What lay between was never on screen and is not read: the view no
  // longer reaches back to the read cursor (seen) until scrolling up
  // brings it there. Nor does it join onto the read cursor (joinsAfter,
  // which forgetOld leaves set when nothing is held: a fromRead whose page
  // is not in yet).
  async toNewest(gid) {
    const g = this.group(gid);
    if (!g.opened || !g.newerMore) return;
    this.forgetOld(g, 0);
    g.newerMore = false;
    g.joinsAfter = null;
    g.atNewest = true;
    g.readingOld = false;
    g.olderPages = 0;
    await this.pageUp(g, () => g.order.length >= FILL);
    await this.refreshCounts(g, g.order, MAX_COUNTS);
  },

  closeGroup(gid) {
    const g = this.group(gid);
    g.opened = false;
    g.buf.clear(); // what waits for a gap: the next opening pulls it
    // What a closed group holds joins onto the contiguous cursor.
    this.forgetOld(g, g.newerMore ? 0 : KEEP_CLOSED);
    g.newerMore = false;
    g.joinsAfter = null;
    if (this.current === gid) this.current = null;
    this.cursors.flush(true).then(() => this.syncSoon());
  },

  // reachesRead reports whether g holds every message after its read
  // cursor (or nothing older is left to hold).
  reachesRead(g) {
    const read = readMark(g);
    return !g.olderMore || (g.order.length > 0 && g.order[0] <= read) || (g.joinsAfter !== null && g.joinsAfter <= read);
  },

  // seen is called for a message the user has on screen. Until the view
  // reaches back to the read cursor (a load cut short by a disconnect or a
  // failed page, a view brought to the newest), a read would pass unread
  // messages never shown: none is made; scrolling up, or the next load
  // (fromRead), pages back to them. No count of older pages ends this:
  // read as it was past UNREAD_PAGES of them, a view brought to the
  // newest and scrolled up that far passed the unread messages above.
  // (A trim lets no unread message go before it was on screen.)
  seen(gid, msgid) {
    const g = this.group(gid);
    if (this.reachesRead(g)) this.cursors.seen(g, msgid);
  },

  // markRead reads the open group up to what it received, at the user's
  // word ("Mark all read"): the view does not reach back to the read
  // cursor, so seen reads nothing on screen until it does.
  markRead(gid) {
    const g = this.group(gid);
    this.cursors.seen(g, g.contig);
  },
};
