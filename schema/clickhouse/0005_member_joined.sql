-- A leave names the join it ends (chat.members records written since this
-- column): the `pos` of that join, or -2 when the record does not say (a
-- join, or a leave written before). A member_events filled from a compacted
-- chat.members holds a former member's leave without their join; `joined`
-- still tells which messages they were a member for. 18.16 has no
-- ADD COLUMN IF NOT EXISTS: the store skips the statement when the column is
-- there.
ALTER TABLE member_events ADD COLUMN joined Int64 DEFAULT -2;
