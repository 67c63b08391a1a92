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
-- tpot is the per-stream TPOT histogram in the same layout: one sample per
-- stream with at least two content events and a time between its first and
-- last one (tokens_per_sec > 0), the value 1e6/tokens_per_sec microseconds:
-- the token TPOT when the stream's tokens are known, else the chunk TPOT.
-- The writer computes its bucket index in Go (itl_streams.tpot_idx, like
-- ttft_idx; tokens_per_sec >= 1e6, a TPOT of at most 1 us, is the zero
-- bucket). tpot_sum holds, per bucket index, the sum of the values in it, so
-- a reader can use a bucket's mean as its representative: it lies in the
-- bucket (within hist.RelativeError of every value there, like the standard
-- representative) and is exact when a bucket holds one distinct value.
-- Tokens/s per stream is 1e6/TPOT, a decreasing function, so its median is
-- 1e6 over the TPOT median (collector/query).
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
    ttft_zero       SimpleAggregateFunction(sum, UInt64),
    tpot            SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(UInt64))),
    tpot_sum        SimpleAggregateFunction(sumMap, Tuple(Array(Int32), Array(Float64))),
    tpot_zero       SimpleAggregateFunction(sum, UInt64)
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
    countIf(ttft_us <= 1)                   AS ttft_zero,
    -- the condition below is store.tpotSample's: keep the two in step (the
    -- table name: content_events alone is the sum above)
    sumMap(if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [tpot_idx], []),
           if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [toUInt64(1)], [])) AS tpot,
    sumMap(if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [tpot_idx], []),
           if(itl_streams.content_events >= 2 AND tokens_per_sec > 0 AND tokens_per_sec < 1e6, [1e6 / tokens_per_sec], [])) AS tpot_sum,
    countIf(itl_streams.content_events >= 2 AND tokens_per_sec >= 1e6) AS tpot_zero
FROM itl_streams
GROUP BY minute, site, country, region, browser, os, device, model, release;
