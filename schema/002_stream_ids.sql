-- itl_stream_ids: every stored stream id, for the writer's dedup check.
--
-- Why: a materialized view fires once per insert, so a record resent after a
-- lost ack would be counted twice in the rollup even though itl_streams (a
-- ReplacingMergeTree) collapses it eventually. Duplicates must be dropped
-- BEFORE the insert. The writer therefore removes, per batch, the ids already
-- present here (SELECT ... WHERE stream_id IN (batch ids): a primary-key
-- lookup), and inserts each batch with an insert_deduplication_token derived
-- from its ids, so a retried insert whose first try did land (lost response)
-- is dropped with its materialized views (non_replicated_deduplication_window
-- on the tables). Inserts go through one writer per collector; two collectors
-- racing on the same resend within one second could still both insert it,
-- and a resend later than the dedup window is stored again.
--
-- Filled by a materialized view on itl_streams, so it is as durable as the
-- rows themselves. Ids are random, so a batch's ids hit every granule of an
-- index on stream_id alone: the lookup is bounded in time instead. A resend
-- arrives after its original (within the writer's dedup window, 24 h by
-- default), so the writer looks only at ids received since the batch's
-- oldest row minus the window; ORDER BY (hour, stream_id) prunes the rest.
-- Ids are kept 7 days, well beyond any window.
CREATE TABLE IF NOT EXISTS itl_stream_ids
(
    stream_id   FixedString(16),
    received_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toDate(received_at)
ORDER BY (toStartOfHour(received_at), stream_id)
TTL toDateTime(received_at) + INTERVAL 7 DAY
SETTINGS non_replicated_deduplication_window = 1000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_stream_ids_mv TO itl_stream_ids AS
SELECT stream_id, received_at
FROM itl_streams;
