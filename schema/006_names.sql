-- 006: plain names instead of numeric codes. A user writing SQL sees
-- status = 'aborted' and ttft_cause = 'network', not 2; the names are
-- wasm/meter's FormatNames, StatusNames, CauseNames and EndNames, and every
-- API speaks the same ones.
--
-- Type: LowCardinality(String), as the OpenTelemetry ClickHouse exporter
-- stores StatusCode and SpanKind. It costs what an Enum8 costs on disk and in
-- memory (a dictionary per part, small integer keys), reads as a plain string
-- in every client, and accepts a name this schema does not list yet: a newer
-- collector's new status or cause is stored, where an Enum8 would refuse the
-- whole insert (and a collector would quarantine good rows) until every
-- database had been altered first.
--
-- How existing rows keep their meaning without rewriting them: each code
-- column is renamed to <name>_code (metadata only), and a column of the old
-- name is added with a DEFAULT that maps the code to its name. Parts written
-- before this migration have no such column, so ClickHouse computes the
-- DEFAULT on read (and writes it when those parts next merge); rows written
-- since carry the name the collector sends, and their <name>_code is 0. Nothing
-- here is a mutation: every statement changes metadata only, so it is safe on
-- the start-up path. To drop the _code columns one day, first run
-- ALTER TABLE ... MATERIALIZE COLUMN <name> (a mutation: off-peak, by hand).
--
-- Re-running: ADD ... IF NOT EXISTS is idempotent; a RENAME COLUMN whose new
-- name already exists is skipped by the migration runner (store.Migrate
-- reads system.columns), because the engine would refuse it and the old name
-- now holds the names.
--
-- A name not in a mapping (a code from a newer sender) reads 'unknown', as
-- meter.Name does.

ALTER TABLE itl_streams RENAME COLUMN IF EXISTS format TO format_code;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS format LowCardinality(String)
    DEFAULT transform(format_code, [0, 1, 2, 3, 4, 5, 6, 7, 8]::Array(UInt8),
        ['unknown', 'openai_chat', 'openai_responses', 'anthropic', 'vercel_ai', 'ollama', 'sse', 'ndjson', 'text'], 'unknown')
    COMMENT 'API format (meter.FormatNames)' AFTER format_code;

ALTER TABLE itl_streams RENAME COLUMN IF EXISTS status TO status_code;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS status LowCardinality(String)
    DEFAULT transform(status_code, [0, 1, 2, 3, 4]::Array(UInt8),
        ['open', 'complete', 'aborted', 'error', 'http_error'], 'unknown')
    COMMENT 'how the stream ended (meter.StatusNames)' AFTER status_code;

ALTER TABLE itl_streams RENAME COLUMN IF EXISTS ttft_cause TO ttft_cause_code;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS ttft_cause LowCardinality(String)
    DEFAULT transform(ttft_cause_code, [0, 1, 2, 3, 4]::Array(UInt8),
        ['none', 'unknown', 'network', 'page', 'origin'], 'unknown')
    COMMENT 'cause of the wait for the first token (meter.CauseNames)' AFTER ttft_cause_code;

ALTER TABLE itl_streams RENAME COLUMN IF EXISTS stall_cause TO stall_cause_code;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS stall_cause Array(LowCardinality(String))
    DEFAULT arrayMap(c -> transform(c, [0, 1, 2, 3, 4]::Array(UInt8),
        ['none', 'unknown', 'network', 'page', 'origin'], 'unknown'), stall_cause_code)
    COMMENT 'cause of each stall_* entry (meter.CauseNames)' AFTER stall_cause_code;

-- How the body ended (meter.EndNames: body_end, closed_after_end, abort,
-- error); '' for rows stored before this migration and for senders that do
-- not say. headers_us: when the response headers arrived, since t0; NULL
-- when the request ended before them (status aborted or error, http_status
-- 0, duration_us = the time waited) and in rows of older senders, which are
-- told apart by end_reason = ''.
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS end_reason LowCardinality(String) DEFAULT ''
    COMMENT 'how the body ended (meter.EndNames)' AFTER http_status;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS headers_us Nullable(UInt32)
    COMMENT 'response headers since t0; NULL: ended before them (or an older sender)' AFTER end_reason;

ALTER TABLE itl_streams COMMENT COLUMN IF EXISTS format_code 'code of rows stored before 006; read format';
ALTER TABLE itl_streams COMMENT COLUMN IF EXISTS status_code 'code of rows stored before 006; read status';
ALTER TABLE itl_streams COMMENT COLUMN IF EXISTS ttft_cause_code 'code of rows stored before 006; read ttft_cause';
ALTER TABLE itl_streams COMMENT COLUMN IF EXISTS stall_cause_code 'codes of rows stored before 006; read stall_cause';

-- itl_origin (005_origin.sql): the same four columns.
ALTER TABLE itl_origin RENAME COLUMN IF EXISTS format TO format_code;
ALTER TABLE itl_origin ADD COLUMN IF NOT EXISTS format LowCardinality(String)
    DEFAULT transform(format_code, [0, 1, 2, 3, 4, 5, 6, 7, 8]::Array(UInt8),
        ['unknown', 'openai_chat', 'openai_responses', 'anthropic', 'vercel_ai', 'ollama', 'sse', 'ndjson', 'text'], 'unknown')
    COMMENT 'API format (meter.FormatNames)' AFTER format_code;

ALTER TABLE itl_origin RENAME COLUMN IF EXISTS status TO status_code;
ALTER TABLE itl_origin ADD COLUMN IF NOT EXISTS status LowCardinality(String)
    DEFAULT transform(status_code, [0, 1, 2, 3, 4]::Array(UInt8),
        ['open', 'complete', 'aborted', 'error', 'http_error'], 'unknown')
    COMMENT 'how the origin response ended (meter.StatusNames)' AFTER status_code;

ALTER TABLE itl_origin RENAME COLUMN IF EXISTS ttft_cause TO ttft_cause_code;
ALTER TABLE itl_origin ADD COLUMN IF NOT EXISTS ttft_cause LowCardinality(String)
    DEFAULT transform(ttft_cause_code, [0, 1, 2, 3, 4]::Array(UInt8),
        ['none', 'unknown', 'network', 'page', 'origin'], 'unknown')
    COMMENT 'refined cause of the wait for the first token (meter.CauseNames)' AFTER ttft_cause_code;

ALTER TABLE itl_origin RENAME COLUMN IF EXISTS stall_cause TO stall_cause_code;
ALTER TABLE itl_origin ADD COLUMN IF NOT EXISTS stall_cause Array(LowCardinality(String))
    DEFAULT arrayMap(c -> transform(c, [0, 1, 2, 3, 4]::Array(UInt8),
        ['none', 'unknown', 'network', 'page', 'origin'], 'unknown'), stall_cause_code)
    COMMENT 'refined cause per itl_streams.stall_* entry (meter.CauseNames)' AFTER stall_cause_code;

ALTER TABLE itl_origin COMMENT COLUMN IF EXISTS format_code 'code of rows stored before 006; read format';
ALTER TABLE itl_origin COMMENT COLUMN IF EXISTS status_code 'code of rows stored before 006; read status';
ALTER TABLE itl_origin COMMENT COLUMN IF EXISTS ttft_cause_code 'code of rows stored before 006; read ttft_cause';
ALTER TABLE itl_origin COMMENT COLUMN IF EXISTS stall_cause_code 'codes of rows stored before 006; read stall_cause';

-- itl_rollup_1m: how streams that did not complete ended. aborted and failed
-- count status 'aborted' and 'error'; before_headers counts those of them
-- that ended before the response headers (the user gave up, or the network
-- failed, before the first byte), before_headers_us their time waited.
-- Older rows add nothing (the defaults are 0).
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS aborted SimpleAggregateFunction(sum, UInt64) AFTER completed;
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS failed SimpleAggregateFunction(sum, UInt64) AFTER aborted;
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS before_headers SimpleAggregateFunction(sum, UInt64) AFTER failed;
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS before_headers_us SimpleAggregateFunction(sum, UInt64) AFTER before_headers;

-- The rollups' views compared codes (status = 1, ttft_cause = 2); they now
-- compare names. ALTER ... MODIFY QUERY swaps a view's query in one metadata
-- change: the target tables (itl_rollup_1m, itl_origin_1m) and every row
-- they hold stay as they are, and no insert falls between an old view and a
-- new one. The rollup tables never stored codes (only counts per status and
-- cause), so their keys and rows need no change. Re-running sets the same
-- query again.
ALTER TABLE itl_rollup_1m_mv MODIFY QUERY
SELECT
    toStartOfMinute(received_at) AS minute,
    site, country, region, browser, os, device, model, release,
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
    countIf(itl_streams.content_events >= 2 AND tokens_per_sec >= 1e6) AS tpot_zero
FROM itl_streams
GROUP BY minute, site, country, region, browser, os, device, model, release;

ALTER TABLE itl_rollup_1m_cause_mv MODIFY QUERY
SELECT
    toStartOfMinute(received_at)            AS minute,
    site, country, region, browser, os, device, model, release,
    sum(stalled_us_unknown)                 AS stalled_us_unknown,
    sum(stalled_us_network)                 AS stalled_us_network,
    sum(stalled_us_page)                    AS stalled_us_page,
    sum(stalled_us_origin)                  AS stalled_us_origin,
    countIf(ttft_cause = 'unknown')         AS ttft_unknown,
    countIf(ttft_cause = 'network')         AS ttft_network,
    countIf(ttft_cause = 'page')            AS ttft_page,
    countIf(ttft_cause = 'origin')          AS ttft_origin
FROM itl_streams
GROUP BY minute, site, country, region, browser, os, device, model, release;

ALTER TABLE itl_origin_1m_mv MODIFY QUERY
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
    countIf(ttft_cause = 'unknown')         AS ttft_unknown,
    countIf(ttft_cause = 'network')         AS ttft_network,
    countIf(ttft_cause = 'page')            AS ttft_page,
    countIf(ttft_cause = 'origin')          AS ttft_origin,
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
