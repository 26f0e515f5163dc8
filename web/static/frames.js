// frames.js: what the page takes from the server's frames. A part that is
// not what PROTOCOL.md says (a msgid that is no integer, a group without a
// gid, a list that is no list, null) is dropped with a warning and the
// rest is taken: trusted, it became a NaN cursor that stopped a group for
// good, a group named "undefined", or an exception that ended the handling
// of the frame, or every session at its first sync.

// A msgid is an offset: an integer from 0. A cursor is one, or -1 (none).
export const isMsgid = (v) => Number.isSafeInteger(v) && v >= 0;
export const isCursor = (v) => Number.isSafeInteger(v) && v >= -1;
const isCount = isMsgid;
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const isGid = (v) => typeof v === 'string' && v !== '';

export function dropped(what, v) {
  console.warn(`chatd: ${what} dropped:`, String(JSON.stringify(v)).slice(0, 200));
}

// list is v when it is a list; absent (or null) it is empty, silently.
function list(v, what) {
  if (Array.isArray(v)) return v;
  if (v !== undefined && v !== null) dropped(`${what} that is no list`, v);
  return [];
}

// frame is a frame that is an object, else null.
export function frame(f) {
  if (isObject(f)) return f;
  dropped('a frame that is no object', f);
  return null;
}

// messages are the messages of a push (gid undefined: each names its
// group) or of a page of gid (each of that group, or naming none). A prev
// that is no cursor is left as it is: it matches no cursor, so the message
// waits for a pull, as one with prev unknown does.
export function messages(msgs, what, gid) {
  return list(msgs, `the msgs of a ${what}`).filter((m) => {
    const ok = isObject(m) && isMsgid(m.msgid) &&
      (gid === undefined ? isGid(m.gid) : m.gid === undefined || m.gid === gid);
    if (!ok) dropped(`a message of a ${what}`, m);
    return ok;
  });
}

// page is a page answer of gid: its messages, more, and its head (-1 when
// it names none: the head known stays). A page of another group is
// empty: its messages that name no group were taken as gid's. A more
// that is no boolean is false: any truthy word had the page pull again
// from where it was, or page up for ever.
export function page(p, gid) {
  if (p.gid !== gid) {
    dropped(`a page of another group than ${gid}`, p);
    return { msgs: [], more: false, head: -1 };
  }
  let head = p.head;
  if (!isCursor(head)) {
    dropped('the head of a page', head);
    head = -1;
  }
  let more = p.more;
  if (typeof more !== 'boolean') {
    dropped('the more of a page', more);
    more = false;
  }
  return { msgs: messages(p.msgs, 'page', gid), more, head };
}

// counts are the read counts of a receipts or counts frame.
export function counts(cs) {
  return list(cs, 'read counts').filter((c) => {
    const ok = isObject(c) && isMsgid(c.msgid) && isCount(c.read) && isCount(c.audience);
    if (!ok) dropped('a read count', c);
    return ok;
  });
}

// groups are the group states of a synced answer: each with a gid and its
// cursors; an unread that is no count is 0.
export function groups(gs) {
  const out = [];
  for (const g of list(gs, 'the groups of a sync')) {
    if (!isObject(g) || !isGid(g.gid) || !isCursor(g.head) || !isCursor(g.ack) || !isCursor(g.read)) {
      dropped('a group of a sync', g);
      continue;
    }
    out.push(isCount(g.unread) ? g : { ...g, unread: 0 });
  }
  return out;
}

// refused are the refused entries of an ok answering a cursors frame: a
// map from "op gid" (op ack or read) to the entry's code and message, as
// errorText has them. An entry of another shape is dropped (warned): its
// ack or read counts as taken, and a lost one is only sent again later.
export function refused(v) {
  const out = new Map();
  for (const r of list(v, 'the refused entries of an ok')) {
    if (!isObject(r) || (r.op !== 'ack' && r.op !== 'read') || !isGid(r.gid)) {
      dropped('a refused entry of an ok', r);
      continue;
    }
    out.set(`${r.op} ${r.gid}`, errorText(r));
  }
  return out;
}

// names are the members named in a readers answer's list v.
export function names(v) {
  return list(v, 'readers').filter((n) => {
    const ok = typeof n === 'string';
    if (!ok) dropped('a reader that is no name', n);
    return ok;
  });
}

// uid is the user an authed frame names, or null (warned): one that is
// no id became the page's user, and its own messages were no longer its.
export function uid(f) {
  if (isGid(f.uid)) return f.uid;
  dropped('the uid of an authed frame', f.uid);
  return null;
}

// gid is f.gid when it is one, else null (warned).
export function gid(f) {
  if (isGid(f.gid)) return f.gid;
  dropped(`a ${f.op} frame without a gid`, f);
  return null;
}

// errorText is what an error frame says: its code and message, each as
// the server's words or, missing, a word that says so.
export function errorText(f) {
  const code = typeof f.code === 'string' && f.code !== '' ? f.code : 'error';
  const message = typeof f.message === 'string' && f.message !== '' ? f.message : 'the server gave no reason';
  return { code, message: message.slice(0, 500) };
}
