-- 014: itl_streams_sample, the streams whose id hashes into the lowest
-- sixteenth of cityHash64's range, with the columns a comparison reads, so
-- that a comparison over a long range reads a sixteenth of the rows.
--
-- Why: /api/compare takes, per side, the MaxCompareStreams streams with the
-- smallest cityHash64(stream_id) among those matching (a deterministic
-- pseudo-random sample; collector/query/compare.go). Finding them read the
-- id, the dimension and the metrics of every stream of the range: at 10 M
-- streams over 30 days, p95 550-670 ms for the two sides (docs/figures.md,
-- "The dashboard's reads"). Every stream with a hash below 2^60 is here, so
-- when a side has at least MaxCompareStreams streams here, its smallest
-- hashes are all here and the answer is the one itl_streams gives, stream
-- for stream; with fewer, the side is read from itl_streams as before. The
-- number of streams matching is counted exactly apart (collector/query).
--
-- Columns: the time, site and id; hash, the sampling key, cityHash64 of the
-- id; the column of every dimension (collector/dimension: a comparison may
-- filter by any of them and compare by any; its test checks that every
-- dimension's column is here); and the columns of the compared metrics
-- (query.CompareMetrics). Engine, partitioning key and sorting key as
-- itl_streams, so a stream stored twice collapses here as there.
--
-- Fed by a view on itl_streams' inserts, exactly once as the rollups (the
-- promoter's token, the deduplication window on the target). TTL: the
-- configured raw-data TTL, applied with itl_streams' (store.applyTTL).
CREATE TABLE IF NOT EXISTS itl_streams_sample
(
    received_at     DateTime64(3, 'UTC') CODEC(Delta, ZSTD),
    site            LowCardinality(String),
    stream_id       FixedString(16),
    hash            UInt64,

    country         LowCardinality(String),
    region          LowCardinality(String),
    browser         LowCardinality(String),
    os              LowCardinality(String),
    device          LowCardinality(String),
    model           LowCardinality(String),
    release         LowCardinality(String),
    colo            LowCardinality(String),
    url_origin      LowCardinality(String),
    http_proto      LowCardinality(String),

    ttft_us         Nullable(UInt32),
    content_events  UInt32,
    gap_p50_us      UInt32,
    gap_p99_us      UInt32,
    stalls          UInt32,
    tokens_per_sec  Float32
)
ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toYYYYMM(received_at)
ORDER BY (site, toStartOfHour(received_at), region, browser, model, stream_id)
TTL toDateTime(received_at) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_streams_sample_mv TO itl_streams_sample AS
SELECT
    received_at, site, stream_id, cityHash64(stream_id) AS hash,
    country, region, browser, os, device, model, release, colo, url_origin, http_proto,
    ttft_us, content_events, gap_p50_us, gap_p99_us, stalls, tokens_per_sec
FROM itl_streams
WHERE cityHash64(stream_id) < 1152921504606846976;

-- itl_streams_sample_from: from which hour on itl_streams_sample holds every
-- sampled stream, as itl_rollup_1h_from does for the hourly rollups (see
-- there): the view sees only the inserts made after it was created, so on a
-- database with streams the hour after the later of the latest received_at
-- and this statement's clock is the first complete one. A comparison whose
-- range starts earlier reads itl_streams. An empty database is complete from
-- the start.
CREATE TABLE IF NOT EXISTS itl_streams_sample_from
(
    complete_from DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY tuple()
AS SELECT if((SELECT count() FROM itl_streams) = 0, toDateTime(0, 'UTC'),
    toStartOfHour(greatest((SELECT toDateTime(max(received_at)) FROM itl_streams), now())) + INTERVAL 1 HOUR);
