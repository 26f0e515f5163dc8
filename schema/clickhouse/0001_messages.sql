-- Every group message, stored once. msgid is the record's offset in its
-- partition of chat.messages; (gid, msgid) identifies a message. A replayed
-- record has the same sorting key and collapses into one row after a merge;
-- readers use FINAL (or LIMIT 1 BY msgid) to be exact before that.
-- Retention: ALTER TABLE messages DROP PARTITION <YYYYMM> (UTC months).
CREATE TABLE IF NOT EXISTS messages
(
    gid           String,
    msgid         UInt64,
    sender        String,
    client_msg_id String,
    sent_at_ms    Int64,
    body          String,
    `partition`   UInt16,
    sent_at       DateTime('UTC') MATERIALIZED toDateTime(intDiv(sent_at_ms, 1000), 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(sent_at)
ORDER BY (gid, msgid);
