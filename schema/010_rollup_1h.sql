-- 010: itl_rollup_1h, the per-hour rollup, so long ranges read far fewer rows.
--
-- Why: itl_rollup_1m groups each minute by eight dimensions (country, region,
-- browser, OS, device, model, release, colo). At a few dozen streams a minute
-- nearly every stream has a group of its own (measured: 0.97 rows per stream
-- at 2 M streams over 30 days), so a month of the minute table is about as
-- many rows, and as many histograms to merge, as the raw itl_streams rows.
-- An hour holds 60 times the streams in the same groups: the rows shrink by
-- up to 60 times, by as much as the traffic fills the groups (see docs/figures.md,
-- "The dashboard's reads", for the measured figures). collector/query reads it for
-- the whole hours of a request whose time-series step is a whole number of
-- hours (summaries and breakdowns have none), and the minute table for the
-- partial hours at either end of the range, so every answer equals the
-- minute table's, whatever the range.
--
-- Same columns, dimensions, sorting and TTL as itl_rollup_1m (hour in place
-- of minute); read it the same way (sum, max, sumMap).
--
-- Fed by one materialized view on itl_streams, not chained from the minute
-- table: itl_rollup_1m is filled by two views (003 and the causes' view of
-- 005) that each write half of its columns, so a view on it would fire twice
-- per insert and depend on how the minute table happens to be filled. The
-- view's expressions are those of itl_rollup_1m_mv and itl_rollup_1m_cause_mv
-- (009_edge.sql) with toStartOfHour: keep the three in step (a test compares
-- the two tables row for row, collector/query's TestHourlyRollupEqualsMinute).
--
-- Exactly once: the promoter inserts into itl_streams with a token and
-- deduplicate_blocks_in_dependent_materialized_views (007_inbox.sql), so a
-- rerun's block for this view is dropped by the view's derived token; that
-- needs the deduplication window on the target, as on every view target.
CREATE TABLE IF NOT EXISTS itl_rollup_1h
(
    hour            DateTime('UTC'),
    site            LowCardinality(String),
    country         LowCardinality(String),
    region          LowCardinality(String),
    browser         LowCardinality(String),
    os              LowCardinality(String),
    device          LowCardinality(String),
    model           LowCardinality(String),
    release         LowCardinality(String),
    colo            LowCardinality(String),

    streams         SimpleAggregateFunction(sum, UInt64),
    completed       SimpleAggregateFunction(sum, UInt64),
    aborted         SimpleAggregateFunction(sum, UInt64),
    failed          SimpleAggregateFunction(sum, UInt64),
    before_headers  SimpleAggregateFunction(sum, UInt64),
    before_headers_us SimpleAggregateFunction(sum, UInt64),
    smooth          SimpleAggregateFunction(sum, UInt64),
    with_ttft       SimpleAggregateFunction(sum, UInt64),
    content_events  SimpleAggregateFunction(sum, UInt64),
    tokens          SimpleAggregateFunction(sum, UInt64),
    reads           SimpleAggregateFunction(sum, UInt64),
    bytes           SimpleAggregateFunction(sum, UInt64),
    stalls          SimpleAggregateFunction(sum, UInt64),
    stalled_us      SimpleAggregateFunction(sum, UInt64),
    stalls_unknown  SimpleAggregateFunction(sum, UInt64),
    stalls_network  SimpleAggregateFunction(sum, UInt64),
    stalls_page     SimpleAggregateFunction(sum, UInt64),
    stalls_origin   SimpleAggregateFunction(sum, UInt64),
    max_gap_us      SimpleAggregateFunction(max, UInt32),

    itl             SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    itl_zero        SimpleAggregateFunction(sum, UInt64),
    itl_tok         SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    itl_tok_zero    SimpleAggregateFunction(sum, UInt64),
    ttft            SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    ttft_zero       SimpleAggregateFunction(sum, UInt64),
    tpot            SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    tpot_sum        SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(Float64))),
    tpot_zero       SimpleAggregateFunction(sum, UInt64),

    stalled_us_unknown SimpleAggregateFunction(sum, UInt64),
    stalled_us_network SimpleAggregateFunction(sum, UInt64),
    stalled_us_page    SimpleAggregateFunction(sum, UInt64),
    stalled_us_origin  SimpleAggregateFunction(sum, UInt64),
    ttft_unknown       SimpleAggregateFunction(sum, UInt64),
    ttft_network       SimpleAggregateFunction(sum, UInt64),
    ttft_page          SimpleAggregateFunction(sum, UInt64),
    ttft_origin        SimpleAggregateFunction(sum, UInt64),
    stalls_origin_edge      SimpleAggregateFunction(sum, UInt64),
    stalls_edge_browser     SimpleAggregateFunction(sum, UInt64),
    stalled_us_origin_edge  SimpleAggregateFunction(sum, UInt64),
    stalled_us_edge_browser SimpleAggregateFunction(sum, UInt64),
    ttft_origin_edge        SimpleAggregateFunction(sum, UInt64),
    ttft_edge_browser       SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (site, hour, country, region, browser, os, device, model, release, colo)
TTL hour + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rollup_1h_mv TO itl_rollup_1h AS
SELECT
    toStartOfHour(received_at)              AS hour,
    site, country, region, browser, os, device, model, release, colo,
    count()                                 AS streams,
    countIf(status = 'complete')            AS completed,
    countIf(status = 'aborted')             AS aborted,
    countIf(status = 'error')               AS failed,
    countIf(status IN ('aborted', 'error') AND end_reason != '' AND headers_us IS NULL) AS before_headers,
    sumIf(ifNull(duration_us, 0), status IN ('aborted', 'error') AND end_reason != '' AND headers_us IS NULL) AS before_headers_us,
    countIf(smooth)                         AS smooth,
    countIf(ttft_us IS NOT NULL)            AS with_ttft,
    sum(content_events)                     AS content_events,
    sum(tokens)                             AS tokens,
    sum(reads)                              AS reads,
    sum(bytes)                              AS bytes,
    sum(stalls)                             AS stalls,
    sum(stalled_us)                         AS stalled_us,
    sum(stalls_unknown)                     AS stalls_unknown,
    sum(stalls_network)                     AS stalls_network,
    sum(stalls_page)                        AS stalls_page,
    sum(stalls_origin)                      AS stalls_origin,
    max(gap_max_us)                         AS max_gap_us,
    sumMap(itl_idx, itl_cnt)                AS itl,
    sum(itl_zero)                           AS itl_zero,
    sumMap(itl_tok_idx, itl_tok_cnt)        AS itl_tok,
    sum(itl_tok_zero)                       AS itl_tok_zero,
    sumMap(if(ttft_us > 1, [ttft_idx], []), if(ttft_us > 1, [toUInt64(1)], [])) AS ttft,
    countIf(ttft_us <= 1)                   AS ttft_zero,
    -- the condition below is store.tpotSample's: keep the two in step (the
    -- table name: content_events alone is the sum above)
    sumMap(if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [tpot_idx], []),
           if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [toUInt64(1)], [])) AS tpot,
    sumMap(if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [tpot_idx], []),
           if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [1e6 / tokens_per_sec], [])) AS tpot_sum,
    countIf(itl_streams.content_events >= 2 AND tokens_per_sec >= 1e6) AS tpot_zero,
    sum(itl_streams.stalled_us_unknown)     AS stalled_us_unknown,
    sum(itl_streams.stalled_us_network)     AS stalled_us_network,
    sum(itl_streams.stalled_us_page)        AS stalled_us_page,
    sum(itl_streams.stalled_us_origin)      AS stalled_us_origin,
    countIf(ttft_cause = 'unknown')         AS ttft_unknown,
    countIf(ttft_cause = 'network')         AS ttft_network,
    countIf(ttft_cause = 'page')            AS ttft_page,
    countIf(ttft_cause = 'origin')          AS ttft_origin,
    sum(itl_streams.stalls_origin_edge)      AS stalls_origin_edge,
    sum(itl_streams.stalls_edge_browser)     AS stalls_edge_browser,
    sum(itl_streams.stalled_us_origin_edge)  AS stalled_us_origin_edge,
    sum(itl_streams.stalled_us_edge_browser) AS stalled_us_edge_browser,
    countIf(ttft_hop = 'origin_edge')       AS ttft_origin_edge,
    countIf(ttft_hop = 'edge_browser')      AS ttft_edge_browser
FROM itl_streams
GROUP BY hour, site, country, region, browser, os, device, model, release, colo;

-- itl_rollup_1h_dim: per hour and per value of one dimension at a time,
-- so a long range's summary, time series or breakdown by one dimension (the
-- dashboard's default views) reads a few rows per hour. Measured on the
-- seeded traffic of make bench, itl_rollup_1h keeps most of the minute
-- table's rows: an hour of a site holds a few thousand streams spread over
-- the thousands of combinations of eight dimensions, so most combinations
-- are a stream or two. Each dimension alone has a few dozen values at most.
--
-- Every stream is counted once under dim '' (value ''), the whole site,
-- and once under each dimension (dim 'country' with its country, dim
-- 'region', ...): read rows of one dim only, never across dims. Columns
-- as itl_rollup_1h. collector/query reads it when a request names at most
-- one dimension (its filter and its breakdown together), itl_rollup_1h
-- otherwise, with the same rule for whole hours.
--
-- Fed by a view on itl_rollup_1h's inserts (one block per insert into
-- itl_streams: one view feeds that table), so its sums are those of the
-- hourly rows by construction. Exactly once as the others: the promoter's
-- token reaches the views of views (deduplicate_blocks_in_dependent_
-- materialized_views), each target with its deduplication window.
CREATE TABLE IF NOT EXISTS itl_rollup_1h_dim
(
    hour            DateTime('UTC'),
    site            LowCardinality(String),
    dim             LowCardinality(String),
    value           LowCardinality(String),

    streams         SimpleAggregateFunction(sum, UInt64),
    completed       SimpleAggregateFunction(sum, UInt64),
    aborted         SimpleAggregateFunction(sum, UInt64),
    failed          SimpleAggregateFunction(sum, UInt64),
    before_headers  SimpleAggregateFunction(sum, UInt64),
    before_headers_us SimpleAggregateFunction(sum, UInt64),
    smooth          SimpleAggregateFunction(sum, UInt64),
    with_ttft       SimpleAggregateFunction(sum, UInt64),
    content_events  SimpleAggregateFunction(sum, UInt64),
    tokens          SimpleAggregateFunction(sum, UInt64),
    reads           SimpleAggregateFunction(sum, UInt64),
    bytes           SimpleAggregateFunction(sum, UInt64),
    stalls          SimpleAggregateFunction(sum, UInt64),
    stalled_us      SimpleAggregateFunction(sum, UInt64),
    stalls_unknown  SimpleAggregateFunction(sum, UInt64),
    stalls_network  SimpleAggregateFunction(sum, UInt64),
    stalls_page     SimpleAggregateFunction(sum, UInt64),
    stalls_origin   SimpleAggregateFunction(sum, UInt64),
    max_gap_us      SimpleAggregateFunction(max, UInt32),

    itl             SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    itl_zero        SimpleAggregateFunction(sum, UInt64),
    itl_tok         SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    itl_tok_zero    SimpleAggregateFunction(sum, UInt64),
    ttft            SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    ttft_zero       SimpleAggregateFunction(sum, UInt64),
    tpot            SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    tpot_sum        SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(Float64))),
    tpot_zero       SimpleAggregateFunction(sum, UInt64),

    stalled_us_unknown SimpleAggregateFunction(sum, UInt64),
    stalled_us_network SimpleAggregateFunction(sum, UInt64),
    stalled_us_page    SimpleAggregateFunction(sum, UInt64),
    stalled_us_origin  SimpleAggregateFunction(sum, UInt64),
    ttft_unknown       SimpleAggregateFunction(sum, UInt64),
    ttft_network       SimpleAggregateFunction(sum, UInt64),
    ttft_page          SimpleAggregateFunction(sum, UInt64),
    ttft_origin        SimpleAggregateFunction(sum, UInt64),
    stalls_origin_edge      SimpleAggregateFunction(sum, UInt64),
    stalls_edge_browser     SimpleAggregateFunction(sum, UInt64),
    stalled_us_origin_edge  SimpleAggregateFunction(sum, UInt64),
    stalled_us_edge_browser SimpleAggregateFunction(sum, UInt64),
    ttft_origin_edge        SimpleAggregateFunction(sum, UInt64),
    ttft_edge_browser       SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (site, dim, hour, value)
TTL hour + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rollup_1h_dim_mv TO itl_rollup_1h_dim AS
SELECT
    hour, site, d.1 AS dim, d.2 AS value,
    sum(streams) AS streams,
    sum(completed) AS completed,
    sum(aborted) AS aborted,
    sum(failed) AS failed,
    sum(before_headers) AS before_headers,
    sum(before_headers_us) AS before_headers_us,
    sum(smooth) AS smooth,
    sum(with_ttft) AS with_ttft,
    sum(content_events) AS content_events,
    sum(tokens) AS tokens,
    sum(reads) AS reads,
    sum(bytes) AS bytes,
    sum(stalls) AS stalls,
    sum(stalled_us) AS stalled_us,
    sum(stalls_unknown) AS stalls_unknown,
    sum(stalls_network) AS stalls_network,
    sum(stalls_page) AS stalls_page,
    sum(stalls_origin) AS stalls_origin,
    max(max_gap_us) AS max_gap_us,
    sumMap(itl) AS itl,
    sum(itl_zero) AS itl_zero,
    sumMap(itl_tok) AS itl_tok,
    sum(itl_tok_zero) AS itl_tok_zero,
    sumMap(ttft) AS ttft,
    sum(ttft_zero) AS ttft_zero,
    sumMap(tpot) AS tpot,
    sumMap(tpot_sum) AS tpot_sum,
    sum(tpot_zero) AS tpot_zero,
    sum(stalled_us_unknown) AS stalled_us_unknown,
    sum(stalled_us_network) AS stalled_us_network,
    sum(stalled_us_page) AS stalled_us_page,
    sum(stalled_us_origin) AS stalled_us_origin,
    sum(ttft_unknown) AS ttft_unknown,
    sum(ttft_network) AS ttft_network,
    sum(ttft_page) AS ttft_page,
    sum(ttft_origin) AS ttft_origin,
    sum(stalls_origin_edge) AS stalls_origin_edge,
    sum(stalls_edge_browser) AS stalls_edge_browser,
    sum(stalled_us_origin_edge) AS stalled_us_origin_edge,
    sum(stalled_us_edge_browser) AS stalled_us_edge_browser,
    sum(ttft_origin_edge) AS ttft_origin_edge,
    sum(ttft_edge_browser) AS ttft_edge_browser
FROM itl_rollup_1h
ARRAY JOIN [('', ''), ('country', toString(country)), ('region', toString(region)), ('browser', toString(browser)),
    ('os', toString(os)), ('device', toString(device)), ('model', toString(model)), ('release', toString(release)),
    ('colo', toString(colo))] AS d
GROUP BY hour, site, dim, value;

-- itl_rollup_1h_from: from which hour on itl_rollup_1h and itl_rollup_1h_dim
-- hold every stream. The views see only the inserts made after they were
-- created, and a database that had streams then keeps them in itl_rollup_1m
-- only (a backfill would race with the views and count the hour it was made
-- in twice or not at all). Every row stored before the views existed has a
-- received_at at most the latest minute of itl_rollup_1m or the clock of
-- this statement (a collector's received_at is set before its insert), so
-- every hour after the later of the two is complete; hours before it are
-- read from itl_rollup_1m (collector/query). An empty database (a new
-- install, the collector migrating before it ingests) is complete from the
-- start. Created after the views (statements run in file order) and once:
-- IF NOT EXISTS skips the SELECT on a rerun. A cluster node computes its
-- own; read through the Distributed table, the latest of them counts.
CREATE TABLE IF NOT EXISTS itl_rollup_1h_from
(
    complete_from DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY tuple()
AS SELECT if((SELECT count() FROM itl_rollup_1m) = 0, toDateTime(0, 'UTC'),
    toStartOfHour(greatest((SELECT max(minute) FROM itl_rollup_1m), now())) + INTERVAL 1 HOUR);
