-- itl_otlp_exports: the minutes of itl_rollup_1m that the OpenTelemetry
-- export (collector/otlp, `serve --otlp-endpoint`) has claimed, one row per
-- minute, so that several collectors exporting the same database send each
-- minute once, and a restarted exporter goes on from the last claimed minute.
--
-- A claim is an insert of one row carrying the insert_deduplication_token
-- 'itlmon-otlp-<minute>': the first claim of a minute is stored, every later
-- one (another collector's, or the same one's again) is dropped by the
-- engine's deduplication, atomically, so the single row names the one
-- exporter that sends that minute. The window of 10,000 tokens is about a
-- week of minutes, far beyond how far back an exporter retries (an hour). In
-- a cluster, every exporter must insert into the same table: a
-- ReplicatedMergeTree (Keeper deduplicates the tokens across replicas) on one
-- shard, not a Distributed table.
--
-- ORDER BY minute: read by minute. TTL 30 days.
CREATE TABLE IF NOT EXISTS itl_otlp_exports
(
    minute      DateTime('UTC'),
    exporter    String,                     -- the claiming process: host name and a random id
    claimed_at  DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY minute
TTL toDateTime(claimed_at) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;
