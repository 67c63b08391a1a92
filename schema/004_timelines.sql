-- itl_timelines: the sampled raw timelines, one row per sampled stream, for
-- looking at one stream in detail (join on stream_id with itl_streams).
-- ORDER BY (site, stream_id): read by id within a site; the day partition and
-- the TTL (same as itl_streams, set by store.Migrate) bound its size.
CREATE TABLE IF NOT EXISTS itl_timelines
(
    received_at DateTime64(3, 'UTC') CODEC(Delta, ZSTD),
    site        LowCardinality(String),
    stream_id   FixedString(16),
    at_us       Array(UInt32),   -- since t0, microseconds
    read        Array(UInt32),   -- network read ordinal of the stamp
    content     Array(Bool),     -- the stamp carried output content
    dropped     UInt32           -- stamps the browser did not keep
)
ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toDate(received_at)
ORDER BY (site, stream_id)
TTL toDateTime(received_at) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 1000, fsync_after_insert = 1, fsync_part_directory = 1;
