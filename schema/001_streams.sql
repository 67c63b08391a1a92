-- itl_streams: one row per measured stream (a browser record plus what the
-- collector adds). Times are microseconds since t0 (just before the page
-- issued fetch); NULL means "did not happen". No client IPs, query strings or
-- prompt/answer text are ever stored.
--
-- ORDER BY, low to high cardinality: dashboards and the API always filter by
-- site and a time range, then often by region, browser and model. site first
-- (a handful of values), then the hour (prunes granules for any time range),
-- then region, browser, model; stream_id last makes the key unique so the
-- ReplacingMergeTree collapses a duplicate that slipped past the writer's
-- dedup check (see 004_stream_ids.sql).
--
-- Durability: the collector acks a record once its insert returns, so parts
-- are fsynced (fsync_after_insert, fsync_part_directory; about one insert a
-- second per table, so the cost is small). The same holds for the views'
-- target tables.
--
-- TTL: 90 days by default; store.Migrate applies the configured value with
-- ALTER TABLE ... MODIFY TTL (materialize_ttl_after_modify = 0, so no rewrite
-- on start-up).
CREATE TABLE IF NOT EXISTS itl_streams
(
    received_at     DateTime64(3, 'UTC') CODEC(Delta, ZSTD),
    started_at      DateTime64(3, 'UTC') CODEC(Delta, ZSTD),  -- browser wall clock of t0
    site            LowCardinality(String),
    stream_id       FixedString(16),                          -- 128-bit random, from the browser
    origin_id       String,                                   -- the origin's own request id, '' if none

    page_origin     LowCardinality(String),
    page_path       String,
    url_origin      LowCardinality(String),
    url_path        String,
    model           LowCardinality(String),
    http_proto      LowCardinality(String),
    content_type    LowCardinality(String),

    format          UInt8,   -- meter.Format
    status          UInt8,   -- meter.Status
    http_status     UInt16,

    ttfb_us         Nullable(UInt32),
    ttfc_us         Nullable(UInt32),
    ttft_us         Nullable(UInt32),
    ttft_idx        Int32,   -- hist bucket index of ttft_us (0 when NULL or in the zero bucket)
    duration_us     Nullable(UInt32),

    events          UInt32,
    content_events  UInt32,
    tokens          UInt32,
    tokens_reported Bool,
    reads           UInt32,
    bytes           UInt64,

    gap_p50_us      UInt32,
    gap_p95_us      UInt32,
    gap_p99_us      UInt32,
    gap_max_us      UInt32,
    tpot_us         UInt32,  -- chunk TPOT: (t_last - t_first_content)/(content_events - 1)
    tokens_per_sec  Float32, -- 1/token TPOT when tokens are known, else 1/chunk TPOT; 0 without two
                             -- content events at different times
    tpot_idx        Int32,   -- hist bucket index of 1e6/tokens_per_sec, the TPOT the rollup keeps
                             -- (0 when there is no sample or it is in the zero bucket; see 003)
    stalls          UInt32,
    stalled_us      UInt64,
    jank            Float32,
    smooth          Bool,

    -- re-chunking signals
    events_per_read     Float32,
    max_events_per_read UInt32,
    bytes_per_read      Float32,
    sub_floor_share     Float32,

    -- stall attribution (meter.Cause), one column per cause
    stalls_unknown      UInt32,
    stalls_network      UInt32,
    stalls_page         UInt32,
    stalls_origin       UInt32,
    stalled_us_unknown  UInt64,
    stalled_us_network  UInt64,
    stalled_us_page     UInt64,
    stalled_us_origin   UInt64,
    ttft_cause          UInt8,   -- meter.Cause of the wait for the first token

    -- gap histograms, sparse (hist package layout, scale 5, microseconds)
    itl_idx         Array(Int32),
    itl_cnt         Array(UInt64),
    itl_zero        UInt64,
    itl_sum         Float64,
    itl_min         Float64,
    itl_max         Float64,
    itl_tok_idx     Array(Int32),
    itl_tok_cnt     Array(UInt64),
    itl_tok_zero    UInt64,
    itl_tok_sum     Float64,
    itl_tok_min     Float64,
    itl_tok_max     Float64,

    -- the stalls themselves
    stall_start_us  Array(UInt32),
    stall_end_us    Array(UInt32),
    stall_cause     Array(UInt8),
    stall_next_read_events Array(UInt32),
    timeline_dropped UInt32,

    -- client facts of the batch
    release         LowCardinality(String),
    module_version  LowCardinality(String),
    conn_type       LowCardinality(String),
    conn_rtt_ms     UInt16,
    timer_floor_us  UInt32,

    -- enrichment
    country         LowCardinality(String),
    region          LowCardinality(String),
    browser         LowCardinality(String),
    browser_major   UInt16,
    os              LowCardinality(String),
    device          LowCardinality(String)
)
ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toDate(received_at)
ORDER BY (site, toStartOfHour(received_at), region, browser, model, stream_id)
TTL toDateTime(received_at) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 1000, fsync_after_insert = 1, fsync_part_directory = 1;
