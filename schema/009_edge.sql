-- 009: the edge vantage point (wasm/edge, a CDN Worker in front of the
-- origin). Its timelines land in itl_inbox as kind 'edge' (origin_id and
-- stream_id: the stream id the response carried, the one the browser's
-- record has as origin_id, so a cluster shards the three records of a
-- stream together), and the promoter (collector/join) stores them here and
-- joins them with the browser's record and, when there is one, the origin's
-- timeline.
--
-- Hops: a stream crosses origin -> edge -> browser. 'origin_edge' is
-- everything between the origin server and the edge Worker (the origin's
-- proxies, the CDN's own fetch), 'edge_browser' everything after it (the
-- CDN's delivery, a proxy in front of the browser, the client's network).
-- A `network` stall (or wait for the first token) is put on origin_edge
-- when the edge already received the events late or coalesced, on
-- edge_browser when the edge received them on time and the browser did not.

-- itl_edge: the edge's timeline of a stream and, once the browser's record
-- is there, the join. Two versions of a row share the key (site, origin_id),
-- as in itl_origin: version 0 is the edge timeline alone, version 1 adds the
-- client side, the origin when it reported, what each hop added and the
-- hop of each stall. Both carry the edge timeline's received_at, so they
-- land in one partition and the ReplacingMergeTree keeps version 1: read
-- with FINAL (or argMax by version).
--
-- Times of the edge side are microseconds since the Worker got the request;
-- reads are the Worker's reads of the origin's body, arrive_us the read
-- that completed each content event (the first N). The cf facts are
-- Cloudflare's request.cf: never a client address.
--
-- ORDER BY (site, origin_id): rows are looked up by stream id within a site.
-- TTL 90 days like itl_streams and itl_origin.
CREATE TABLE IF NOT EXISTS itl_edge
(
    received_at         DateTime64(3, 'UTC') CODEC(Delta, ZSTD), -- when the edge timeline reached a collector
    site                LowCardinality(String),
    origin_id           String,                                   -- the stream id the response carried
    version             UInt8,                                    -- 0 edge only, 1 joined with the client record

    -- the edge side
    started_at          DateTime64(3, 'UTC'),                     -- edge wall clock when the request reached the Worker
    route               String,                                   -- request path, never the query
    format              LowCardinality(String),                   -- meter.FormatNames
    status              LowCardinality(String),                   -- meter.StatusNames
    http_status         UInt16,
    headers_us          Nullable(UInt32),                         -- the origin's response headers reached the edge
    ttfb_us             Nullable(UInt32),                         -- first body byte read from the origin
    ttft_us             Nullable(UInt32),                         -- first content event read from the origin
    duration_us         UInt32,                                   -- end of the body passed on (or the abort)
    events              UInt32,
    content_events      UInt32,
    reads               UInt32,                                   -- reads of the origin's body
    events_per_read     Float32,
    max_events_per_read UInt32,
    bytes               UInt64,
    gap_p50_us          UInt32,                                   -- exact, of the gaps between content arrivals
    gap_p99_us          UInt32,
    gap_max_us          UInt32,
    stalls              UInt32,                                   -- gaps > 200 ms at the edge
    itl_idx             Array(Int32),                             -- hist layout, scale 5, microseconds
    itl_cnt             Array(UInt64),
    itl_zero            UInt64,
    itl_sum             Float64,
    itl_min             Float64,
    itl_max             Float64,
    arrive_us           Array(UInt32),                            -- content arrival times at the edge, the first N
    arrivals_dropped    UInt32,

    -- what the edge knows of the client (request.cf)
    colo                LowCardinality(String),                   -- the data centre (IATA code)
    edge_country        LowCardinality(String),                   -- ISO 3166-1 alpha-2
    edge_region         LowCardinality(String),                   -- ISO 3166-2 ("DE-BE"), '' if not reported
    region_name         String,                                   -- cf.region, e.g. "Berlin"
    city                String,
    asn                 UInt32,                                   -- 0 unknown
    client_http_proto   LowCardinality(String),                   -- client to edge
    client_tls          LowCardinality(String),
    client_tcp_rtt_ms   Nullable(UInt32),

    -- the join (version 1; zero or empty in version 0)
    stream_id           FixedString(16),                          -- the browser's id: joins itl_streams
    client_received_at  DateTime64(3, 'UTC'),
    country             LowCardinality(String),                   -- as stored on the itl_streams row
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
    has_origin          Bool,                                     -- the origin's timeline was joined too
    origin_ttft_us      Nullable(UInt32),
    origin_gap_p50_us   UInt32,
    origin_gap_p99_us   UInt32,
    -- what each hop added: edge - origin (origin_edge), client - edge
    -- (edge_browser); NULL when a side lacks the value
    added_ttft_origin_edge_us   Nullable(Int64),
    added_ttft_edge_browser_us  Nullable(Int64),
    added_p50_origin_edge_us    Nullable(Int64),
    added_p50_edge_browser_us   Nullable(Int64),
    added_p99_origin_edge_us    Nullable(Int64),
    added_p99_edge_browser_us   Nullable(Int64),
    client_stalls       UInt32,
    stalls_origin_edge  UInt32,                                   -- the client's network stalls by hop
    stalls_edge_browser UInt32,
    stalled_us_origin_edge  UInt64,
    stalled_us_edge_browser UInt64,
    ttft_cause          LowCardinality(String),                   -- refined meter.CauseNames
    ttft_hop            LowCardinality(String),                   -- 'origin_edge', 'edge_browser' or ''
    stall_cause         Array(LowCardinality(String)),            -- refined cause per itl_streams.stall_* entry
    stall_hop           Array(LowCardinality(String)),            -- hop per entry ('' when not a network stall)
    in_streams          Bool                                      -- the refinement reached itl_streams (joined within the hold)
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toDate(received_at)
ORDER BY (site, origin_id)
TTL toDateTime(received_at) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- itl_streams: what the edge adds to the browser's row. colo is the edge's
-- data centre ('' without an edge); country and region come from the edge
-- when it saw the stream (request.cf is more exact than a GeoIP guess).
-- stall_hop is parallel to stall_cause; ttft_hop is the hop of a network
-- wait for the first token. Older rows read '' and no hops.
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS colo LowCardinality(String) DEFAULT ''
    COMMENT 'the edge data centre (IATA code) that served the stream, if an edge reported it' AFTER region;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS ttft_hop LowCardinality(String) DEFAULT ''
    COMMENT 'hop of a network wait for the first token: origin_edge, edge_browser or empty' AFTER ttft_cause;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS stall_hop Array(LowCardinality(String)) DEFAULT arrayMap(x -> '', stall_start_us)
    COMMENT 'hop of each stall_* entry: origin_edge, edge_browser or empty (not a network stall, or no edge)' AFTER stall_cause;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS stalls_origin_edge UInt32 DEFAULT 0 AFTER stalled_us_origin;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS stalls_edge_browser UInt32 DEFAULT 0 AFTER stalls_origin_edge;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS stalled_us_origin_edge UInt64 DEFAULT 0 AFTER stalls_edge_browser;
ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS stalled_us_edge_browser UInt64 DEFAULT 0 AFTER stalled_us_origin_edge;

-- itl_rollup_1m: colo becomes a dimension, the last of the sorting key (a
-- new key column must be added by the same ALTER; rows stored before it
-- have colo '' and keep their order; no DEFAULT: the engine refuses one on
-- a new key column). Network stalls and waits per hop.
ALTER TABLE itl_rollup_1m
    ADD COLUMN IF NOT EXISTS colo LowCardinality(String) AFTER release,
    MODIFY ORDER BY (site, minute, country, region, browser, os, device, model, release, colo);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalls_origin_edge SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalls_edge_browser SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalled_us_origin_edge SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS stalled_us_edge_browser SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS ttft_origin_edge SimpleAggregateFunction(sum, UInt64);
ALTER TABLE itl_rollup_1m ADD COLUMN IF NOT EXISTS ttft_edge_browser SimpleAggregateFunction(sum, UInt64);

-- The rollup's views group by colo too: their queries of 006_names.sql,
-- extended (MODIFY QUERY: one metadata change, no insert between the old
-- view and the new one).
ALTER TABLE itl_rollup_1m_mv MODIFY QUERY
SELECT
    toStartOfMinute(received_at) AS minute,
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
    countIf(itl_streams.content_events >= 2 AND tokens_per_sec >= 1e6) AS tpot_zero
FROM itl_streams
GROUP BY minute, site, country, region, browser, os, device, model, release, colo;

ALTER TABLE itl_rollup_1m_cause_mv MODIFY QUERY
SELECT
    toStartOfMinute(received_at)            AS minute,
    site, country, region, browser, os, device, model, release, colo,
    sum(stalled_us_unknown)                 AS stalled_us_unknown,
    sum(stalled_us_network)                 AS stalled_us_network,
    sum(stalled_us_page)                    AS stalled_us_page,
    sum(stalled_us_origin)                  AS stalled_us_origin,
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
GROUP BY minute, site, country, region, browser, os, device, model, release, colo;
