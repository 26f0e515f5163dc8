// admin.js: what `chatd dev` offers besides the protocol: a token for any
// user id, and groups managed by their members (/v1/dev/). A production
// gateway answers 404 to all of it; there groups are managed with the
// admin token (/v1/admin/) and tokens come from the deployment.

import { ProtocolError, sleep } from './conn.js';

// devToken asks for a token for uid; null when the server hands out none.
export async function devToken(uid) {
  const r = await fetch('/v1/dev/token', { method: 'POST', body: JSON.stringify({ uid }) });
  if (r.status === 404) return null;
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.message || r.statusText);
  return j.token;
}

async function post(token, path, body) {
  const r = await fetch(path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const j = await r.json().catch(() => ({}));
  if (r.status === 404) {
    throw new Error('this server does not let users manage groups (it is not `chatd dev`); an admin uses /v1/admin/groups');
  }
  if (!r.ok) throw new ProtocolError(j.code || String(r.status), j.message || r.statusText);
  return j;
}

// createGroup makes gid with the user and members in it, then waits until
// the membership has taken effect (it goes through chat.members).
export async function createGroup(chat, gid, members) {
  await post(chat.token, '/v1/dev/groups', { gid, members });
  for (let i = 0; i < 40 && !(await chat.sync()).some((gs) => gs.gid === gid); i++) await sleep(250);
}

// addMember adds uid to gid, a group the user is in.
export function addMember(chat, gid, uid) {
  return post(chat.token, `/v1/dev/groups/${encodeURIComponent(gid)}/members`, { uid });
}
