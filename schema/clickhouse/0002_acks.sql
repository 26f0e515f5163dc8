-- The chat.acks event log. (partition, offset) identifies the Kafka record,
-- so a replayed record collapses into one row; queries with FINAL are exact.
-- Retention: ALTER TABLE ack_events DROP PARTITION <YYYYMM> (UTC months).
CREATE TABLE IF NOT EXISTS ack_events
(
    gid         String,
    uid         String,
    upto        Int64,
    at_ms       Int64,
    `partition` UInt16,
    `offset`    UInt64,
    at          DateTime('UTC') MATERIALIZED toDateTime(intDiv(at_ms, 1000), 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (gid, uid, `partition`, `offset`);

-- Each member's delivery cursor. A merge keeps the row with the largest
-- upto, so the cursor never moves backwards, whatever the order of arrival;
-- read it with max(upto) ... GROUP BY uid, or FINAL.
CREATE TABLE IF NOT EXISTS ack_cursors
(
    gid           String,
    uid           String,
    upto          Int64,
    updated_at_ms Int64
)
ENGINE = ReplacingMergeTree(upto)
ORDER BY (gid, uid);
