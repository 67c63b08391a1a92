-- itl_rollup_1m: per-minute aggregates, so a month of dashboard queries reads
-- this table instead of raw rows. Filled by a materialized view on every
-- insert into itl_streams (the writer drops duplicate stream ids before the
-- insert, see 002_stream_ids.sql, so nothing is counted twice).
--
-- Histograms merge by adding counts per bucket index: read them with
-- sumMap(itl) and sum(itl_zero) over any set of rows and feed the result to
-- hist.FromSparse. ttft is a histogram in the same layout (one value per
-- stream), so TTFT quantiles come from the rollup too.
--
-- ORDER BY, low to high cardinality: site, then the minute, then the
-- dimensions dashboards group by. TTL 400 days (a year plus a month).
CREATE TABLE IF NOT EXISTS itl_rollup_1m
(
    minute          DateTime('UTC'),
    site            LowCardinality(String),
    country         LowCardinality(String),
    region          LowCardinality(String),
    browser         LowCardinality(String),
    os              LowCardinality(String),
    device          LowCardinality(String),
    model           LowCardinality(String),
    release         LowCardinality(String),

    streams         SimpleAggregateFunction(sum, UInt64),
    completed       SimpleAggregateFunction(sum, UInt64),
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
    ttft_zero       SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (site, minute, country, region, browser, os, device, model, release)
TTL minute + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 1000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rollup_1m_mv TO itl_rollup_1m AS
SELECT
    toStartOfMinute(received_at) AS minute,
    site, country, region, browser, os, device, model, release,
    count()                                 AS streams,
    countIf(status = 1)                     AS completed,
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
    countIf(ttft_us <= 1)                   AS ttft_zero
FROM itl_streams
GROUP BY minute, site, country, region, browser, os, device, model, release;
