-- The chat.receipts event log, as ack_events is for chat.acks (0002).
-- (partition, offset) identifies the Kafka record, so a replayed record
-- collapses into one row; queries with FINAL, or uniqExact(`partition`,
-- `offset`), min and max, are exact before that. A replayed record carries
-- the same at_ms, so its copies land in the same monthly partition, where
-- ReplacingMergeTree can merge them.
-- Retention: ALTER TABLE receipt_events DROP PARTITION <YYYYMM> (UTC months
-- of at_ms; the ClickHouse store's DropEventsBefore does it). Read counts
-- come from read_cursors, which is kept, but for the earlier stretches of a
-- member who left and came back: their reads are in these events alone.
CREATE TABLE IF NOT EXISTS receipt_events
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

-- Each member's read cursor. A merge keeps the row with the largest upto,
-- so the cursor never moves backwards, whatever the order of arrival; read
-- it with max(upto) ... GROUP BY uid, or FINAL. Not partitioned by time:
-- dropping old receipt_events leaves every cursor in place.
CREATE TABLE IF NOT EXISTS read_cursors
(
    gid           String,
    uid           String,
    upto          Int64,
    updated_at_ms Int64
)
ENGINE = ReplacingMergeTree(upto)
ORDER BY (gid, uid);
