-- itl_origin: the origin's own timeline of a stream (collector/origin, the
-- middleware on the origin server), and once the browser's record of the same
-- stream has arrived, the join of the two (collector/join): the origin's TTFT
-- and ITL, what the path added (client minus origin), and the client's stalls
-- attributed per cause with the origin's evidence.
--
-- Two versions of a row share the key (site, origin_id): version 0 is written
-- when the origin timeline arrives (durable before the reporter gets its 2xx),
-- version 1 when the join is made. Both carry the origin timeline's
-- received_at, so they land in one partition and the ReplacingMergeTree keeps
-- the joined one; read with FINAL (or argMax by version). The joiner makes a
-- stream's join once, whichever side came first.
--
-- ORDER BY (site, origin_id): rows are looked up by stream id within a site;
-- the day partition and the TTL bound the size. TTL 90 days like itl_streams.
CREATE TABLE IF NOT EXISTS itl_origin
(
    received_at         DateTime64(3, 'UTC') CODEC(Delta, ZSTD), -- when the origin timeline reached the collector
    site                LowCardinality(String),
    origin_id           String,                                   -- X-Itlmon-Stream / the app's X-Request-Id
    version             UInt8,                                    -- 0 origin only, 1 joined with the client record

    -- the origin side (times in microseconds since the request reached the middleware)
    started_at          DateTime64(3, 'UTC'),                     -- origin wall clock
    route               String,                                   -- request path, never the query
    format              UInt8,
    status              UInt8,
    http_status         UInt16,
    ttfb_us             Nullable(UInt32),
    ttft_us             Nullable(UInt32),
    duration_us         UInt32,
    events              UInt32,
    content_events      UInt32,
    flushes             UInt32,
    events_per_flush    Float32,
    max_events_per_flush UInt32,
    bytes               UInt64,
    gap_p50_us          UInt32,
    gap_p99_us          UInt32,
    gap_max_us          UInt32,
    stalls              UInt32,                                   -- origin gaps > 200 ms
    itl_idx             Array(Int32),                             -- hist layout, scale 5, microseconds
    itl_cnt             Array(UInt64),
    itl_zero            UInt64,
    itl_sum             Float64,
    itl_min             Float64,
    itl_max             Float64,
    emit_us             Array(UInt32),                            -- content emit times, the first N
    emits_dropped       UInt32,

    -- the client side and the join (version 1; zero/empty in version 0)
    stream_id           FixedString(16),                          -- the browser's id: joins itl_streams
    client_received_at  DateTime64(3, 'UTC'),
    country             LowCardinality(String),
    region              LowCardinality(String),
    browser             LowCardinality(String),
    os                  LowCardinality(String),
    device              LowCardinality(String),
    model               LowCardinality(String),
    release             LowCardinality(String),
    client_ttft_us      Nullable(UInt32),
    client_gap_p50_us   UInt32,
    client_gap_p99_us   UInt32,
    client_events_per_read Float32,
    client_max_events_per_read UInt32,
    added_ttft_us       Nullable(Int64),                          -- client TTFT - origin TTFT
    added_p50_us        Nullable(Int64),                          -- client ITL p50 - origin ITL p50
    added_p99_us        Nullable(Int64),
    client_stalls       UInt32,
    client_stalled_us   UInt64,
    stalls_unknown      UInt32,                                   -- the client's stalls by refined cause
    stalls_network      UInt32,
    stalls_page         UInt32,
    stalls_origin       UInt32,
    stalled_us_unknown  UInt64,
    stalled_us_network  UInt64,
    stalled_us_page     UInt64,
    stalled_us_origin   UInt64,
    ttft_cause          UInt8,                                    -- refined meter.Cause of the wait for the first token
    stall_cause         Array(UInt8),                             -- refined cause per itl_streams.stall_* entry
    in_streams          Bool                                      -- the refinement reached itl_streams (joined within the hold)
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toDate(received_at)
ORDER BY (site, origin_id)
TTL toDateTime(received_at) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 1000;

-- itl_origin_1m: per-minute attribution rollup of joined streams (version 1
-- rows only; the joiner writes one per stream), by the same dimensions as
-- itl_rollup_1m. Carries stalls and stalled ms per refined cause, the TTFT
-- cause, what the path added, and the origin's ITL and TTFT histograms
-- (sumMap, hist layout). ORDER BY and TTL as itl_rollup_1m.
CREATE TABLE IF NOT EXISTS itl_origin_1m
(
    minute              DateTime('UTC'),
    site                LowCardinality(String),
    country             LowCardinality(String),
    region              LowCardinality(String),
    browser             LowCardinality(String),
    os                  LowCardinality(String),
    device              LowCardinality(String),
    model               LowCardinality(String),
    release             LowCardinality(String),

    streams             SimpleAggregateFunction(sum, UInt64),
    stalls_unknown      SimpleAggregateFunction(sum, UInt64),
    stalls_network      SimpleAggregateFunction(sum, UInt64),
    stalls_page         SimpleAggregateFunction(sum, UInt64),
    stalls_origin       SimpleAggregateFunction(sum, UInt64),
    stalled_us_unknown  SimpleAggregateFunction(sum, UInt64),
    stalled_us_network  SimpleAggregateFunction(sum, UInt64),
    stalled_us_page     SimpleAggregateFunction(sum, UInt64),
    stalled_us_origin   SimpleAggregateFunction(sum, UInt64),
    ttft_unknown        SimpleAggregateFunction(sum, UInt64),
    ttft_network        SimpleAggregateFunction(sum, UInt64),
    ttft_page           SimpleAggregateFunction(sum, UInt64),
    ttft_origin         SimpleAggregateFunction(sum, UInt64),
    with_added_ttft     SimpleAggregateFunction(sum, UInt64),
    added_ttft_us       SimpleAggregateFunction(sum, Int64),
    with_added_itl      SimpleAggregateFunction(sum, UInt64),
    added_p50_us        SimpleAggregateFunction(sum, Int64),
    added_p99_us        SimpleAggregateFunction(sum, Int64),
    origin_itl          SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    origin_itl_zero     SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (site, minute, country, region, browser, os, device, model, release)
TTL minute + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_origin_1m_mv TO itl_origin_1m AS
SELECT
    toStartOfMinute(client_received_at)     AS minute,
    site, country, region, browser, os, device, model, release,
    count()                                 AS streams,
    sum(stalls_unknown)                     AS stalls_unknown,
    sum(stalls_network)                     AS stalls_network,
    sum(stalls_page)                        AS stalls_page,
    sum(stalls_origin)                      AS stalls_origin,
    sum(stalled_us_unknown)                 AS stalled_us_unknown,
    sum(stalled_us_network)                 AS stalled_us_network,
    sum(stalled_us_page)                    AS stalled_us_page,
    sum(stalled_us_origin)                  AS stalled_us_origin,
    countIf(ttft_cause = 1)                 AS ttft_unknown,
    countIf(ttft_cause = 2)                 AS ttft_network,
    countIf(ttft_cause = 3)                 AS ttft_page,
    countIf(ttft_cause = 4)                 AS ttft_origin,
    countIf(itl_origin.added_ttft_us IS NOT NULL)      AS with_added_ttft,
    sum(ifNull(itl_origin.added_ttft_us, 0))      AS added_ttft_us,
    countIf(itl_origin.added_p50_us IS NOT NULL)      AS with_added_itl,
    sum(ifNull(itl_origin.added_p50_us, 0))      AS added_p50_us,
    sum(ifNull(itl_origin.added_p99_us, 0))      AS added_p99_us,
    sumMap(itl_idx, itl_cnt)                AS origin_itl,
    sum(itl_zero)                           AS origin_itl_zero
FROM itl_origin
WHERE version = 1
GROUP BY minute, site, country, region, browser, os, device, model, release;

-- itl_rollup_1m (003_rollup.sql) counts stalls per cause; add the stalled
-- time per cause and the TTFT cause counts, filled by a second view on
-- itl_streams that writes only these columns (the others take their
-- defaults, which add nothing when the rows merge). Rows of itl_streams are
-- refined with the origin's evidence when the join was made within the
-- joiner's hold; itl_origin_1m has the refined view of every joined stream.
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalled_us_unknown SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalled_us_network SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalled_us_page SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalled_us_origin SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS ttft_unknown SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS ttft_network SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS ttft_page SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS ttft_origin SimpleAggregateFunction(sum, UInt64);

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rollup_1m_cause_mv TO itl_rollup_1m AS
SELECT
    toStartOfMinute(received_at)            AS minute,
    site, country, region, browser, os, device, model, release,
    sum(stalled_us_unknown)                 AS stalled_us_unknown,
    sum(stalled_us_network)                 AS stalled_us_network,
    sum(stalled_us_page)                    AS stalled_us_page,
    sum(stalled_us_origin)                  AS stalled_us_origin,
    countIf(ttft_cause = 1)                 AS ttft_unknown,
    countIf(ttft_cause = 2)                 AS ttft_network,
    countIf(ttft_cause = 3)                 AS ttft_page,
    countIf(ttft_cause = 4)                 AS ttft_origin
FROM itl_streams
GROUP BY minute, site, country, region, browser, os, device, model, release;
