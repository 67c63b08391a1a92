-- 013: itl_rollup_1d_dim, per day and per value of one dimension at a time,
-- so a month's summary or breakdown merges 30 rows a value instead of 720.
--
-- Why: a breakdown over 30 days read itl_rollup_1h_dim's 720 hourly rows per
-- value and merged five histograms (sumMap) over them; at 10 M streams over
-- 30 days it was the slowest read of the rollups (p95 334 ms), the merge
-- being most of it (docs/figures.md, "The dashboard's reads"). Rows of one
-- day hold 24 times the hours' streams in the same groups.
--
-- Same columns as itl_rollup_1h_dim, day in place of hour (a DateTime, the
-- day's first second in UTC, so that reads can put it in the minute column
-- of the other rollups); read it the same way (rows of one dim only; sum,
-- max, sumMap). collector/query reads it for the whole UTC days of a read
-- without a time series (or one in steps of whole days) that names at most
-- one dimension, from itl_rollup_1d_from on; the hours and minutes around
-- them from the tables it read before.
--
-- Fed by a view on itl_rollup_1h_dim's inserts (one block per insert into
-- itl_streams: one view feeds that table), so its sums are those of the
-- hourly rows by construction, at the cost of one more view per insert whose
-- input is already aggregated (a few rows per hour and value of the insert).
-- Exactly once as the others: the promoter's token reaches the views of
-- views (deduplicate_blocks_in_dependent_materialized_views), the target
-- with its deduplication window.
CREATE TABLE IF NOT EXISTS itl_rollup_1d_dim
(
    day             DateTime('UTC'),
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
PARTITION BY toYYYYMM(day)
ORDER BY (site, dim, day, value)
TTL day + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rollup_1d_dim_mv TO itl_rollup_1d_dim AS
SELECT
    toStartOfDay(hour) AS day, site, dim, value,
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
FROM itl_rollup_1h_dim
GROUP BY day, site, dim, value;

-- itl_rollup_1d_from: from which day on itl_rollup_1d_dim holds every
-- stream, as itl_rollup_1h_from does for the hourly tables (see there): the
-- view sees only inserts made after it was created, so on a database with
-- streams the day after the latest of them (and of this statement's clock)
-- is the first complete one; earlier days are read from the hourly tables.
-- An empty database is complete from the start.
CREATE TABLE IF NOT EXISTS itl_rollup_1d_from
(
    complete_from DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY tuple()
AS SELECT if((SELECT count() FROM itl_rollup_1m) = 0, toDateTime(0, 'UTC'),
    toStartOfDay(greatest((SELECT max(minute) FROM itl_rollup_1m), now())) + INTERVAL 1 DAY);
