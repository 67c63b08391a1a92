-- 012: itl_rollup_1m_site, per minute and site with no other dimension, so
-- that a read of a whole site over hours or a day in steps under an hour
-- (the dashboard's time series, heatmap and causes over one day, in
-- 5-minute steps) reads one row per minute instead of the minute table's.
--
-- Why: itl_rollup_1m groups each minute by eight dimensions, and at a few
-- hundred streams a minute nearly every stream has a group of its own (0.87
-- rows per stream at 10 M streams over 30 days): a day's time series read
-- as many rows, with their histograms, as the raw streams (docs/figures.md,
-- "The dashboard's reads"). itl_rollup_1h_dim (010) serves whole hours;
-- this serves the minutes in between when the read names no dimension (no
-- filter, no breakdown: the dashboard's default views). A table per minute
-- and per value of each dimension (as itl_rollup_1h_dim is per hour) was
-- tried first: it doubled the engine's time per insert into itl_streams on
-- the dashboard report's seed (nine rows per minute group where this writes
-- one), for reads that a filter narrows anyway.
--
-- Fed by a view on itl_rollup_1m's inserts. Two views fill that table
-- (itl_rollup_1m_mv and itl_rollup_1m_cause_mv, each half of its columns,
-- the others at their defaults), so this view runs twice per insert into
-- itl_streams and writes two blocks; every column is a sum, a max or a
-- sumMap, so the two add up to the minute table's rows exactly. Exactly
-- once as the others: the promoter's token reaches the views of views
-- (deduplicate_blocks_in_dependent_materialized_views; the parents keep
-- their identity across restarts since 011_view_ids.sql), the target with
-- its deduplication window. collector/query reads it for the minutes it
-- does not read from the hourly tables, from itl_rollup_1m_site_from on.
CREATE TABLE IF NOT EXISTS itl_rollup_1m_site
(
    minute          DateTime('UTC'),
    site            LowCardinality(String),

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
PARTITION BY toYYYYMM(minute)
ORDER BY (site, minute)
TTL minute + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rollup_1m_site_mv TO itl_rollup_1m_site AS
SELECT
    minute, site,
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
FROM itl_rollup_1m
GROUP BY minute, site;

-- itl_rollup_1m_site_from: from which minute on itl_rollup_1m_site holds
-- every stream, as itl_rollup_1h_from does for the hourly tables (see there): the
-- view sees only inserts made after it was created; minutes before this one
-- are read from itl_rollup_1m. An empty database is complete from the start.
CREATE TABLE IF NOT EXISTS itl_rollup_1m_site_from
(
    complete_from DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY tuple()
AS SELECT if((SELECT count() FROM itl_rollup_1m) = 0, toDateTime(0, 'UTC'),
    toStartOfMinute(greatest((SELECT max(minute) FROM itl_rollup_1m), now())) + INTERVAL 1 MINUTE);
