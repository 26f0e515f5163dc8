-- The chat.members event log: joins and leaves. (partition, offset)
-- identifies the Kafka record, so a replayed record collapses into one row.
-- Not partitioned by time: the current membership is derived from the whole
-- log (the latest event of each gid, uid: argMax(op, `offset`); all events of
-- a group are in one partition).
CREATE TABLE IF NOT EXISTS member_events
(
    gid         String,
    uid         String,
    op          Enum8('join' = 1, 'leave' = 2),
    pos         Int64,
    at_ms       Int64,
    `by`        String,
    `partition` UInt16,
    `offset`    UInt64
)
ENGINE = ReplacingMergeTree
ORDER BY (gid, uid, `partition`, `offset`);
