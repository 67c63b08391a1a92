-- 015: itl_rechunk_1h, the re-chunking counters per hour and per value of
-- one dimension at a time, so that the re-chunking view over a long range
-- reads a few rows per hour instead of every stream.
--
-- Why: the re-chunking view (/api/rechunk, collector/query/rechunk.go) adds
-- up per-stream counters of itl_streams (reads, events, the read patterns,
-- stalls by cause) by any dimension, the API origin and the HTTP protocol
-- included, which the rollups do not have, and joins each stream with its
-- origin timeline (itl_origin) to tell whether the origin batched its
-- events. At 10 M streams over 30 days it read every stream of the range:
-- p95 470-680 ms (docs/figures.md, "The dashboard's reads").
--
-- Every column is a sum, so the hours add up to any range's answer, and the
-- columns are the ones the re-chunking read computes per stream: streams,
-- events, reads and bytes; the sub-floor gaps (sub_floor_share times the
-- stream's gaps) and the gaps; first tokens waited for by the network and
-- first tokens; the streams with 3+ content events ("multi") and of those
-- the ones read in one read, steadily, in bursts (the thresholds of
-- query.CoalescedEventsPerRead and the patterns' rules), with page stalls,
-- with network stalls; and the origin's part: multi streams whose joined
-- origin timeline emitted its content in batches (query.OriginBurstShare of
-- its gaps zero-length) or one event per flush.
--
-- Every stream counts once under dim '' (value '') and once under each
-- dimension's key (collector/dimension: every one, not only the rollups'),
-- from its column; read the rows of one dim only. collector/query reads it
-- for the whole hours of a re-chunking read that names at most one
-- dimension (its filter and its breakdown together), from
-- itl_rechunk_1h_from on, and itl_streams for the rest.
--
-- Two views fill it, each its half of the columns: itl_rechunk_1h_mv on
-- itl_streams' inserts (the browser's counters), itl_rechunk_1h_origin_mv
-- on itl_origin's joined rows (version 1: the origin's part, by the hour the
-- collector received the browser's record and the browser's values of the
-- dimensions, which the join copies into the row). Exactly once as the
-- rollups: the promoter's token, the deduplication window on the target.
-- Durable as they are (fsync of each part): one more part per insert into
-- itl_streams and into itl_origin, whose fsync is most of the view's cost
-- (BenchmarkInsertDirect, docs/figures.md).
--
-- itl_origin gains the browser's values the origin's view needs: colo, the
-- API origin (url_origin), the HTTP protocol and the browser's content
-- events. A collector of an earlier version leaves them at their defaults:
-- while one still promotes during an upgrade, the origin timelines it joins
-- count in itl_streams' reads of the origin's part but not here (their
-- client_content_events is 0, so they are not multi).
ALTER TABLE itl_origin
    ADD COLUMN IF NOT EXISTS colo LowCardinality(String) DEFAULT '' AFTER release,
    ADD COLUMN IF NOT EXISTS url_origin LowCardinality(String) DEFAULT '' AFTER colo,
    ADD COLUMN IF NOT EXISTS http_proto LowCardinality(String) DEFAULT '' AFTER url_origin,
    ADD COLUMN IF NOT EXISTS client_content_events UInt32 DEFAULT 0 AFTER http_proto;

CREATE TABLE IF NOT EXISTS itl_rechunk_1h
(
    hour            DateTime('UTC'),
    site            LowCardinality(String),
    dim             LowCardinality(String),
    value           LowCardinality(String),

    streams         SimpleAggregateFunction(sum, UInt64),
    events          SimpleAggregateFunction(sum, UInt64),
    reads           SimpleAggregateFunction(sum, UInt64),
    bytes           SimpleAggregateFunction(sum, UInt64),
    sub_floor_gaps  SimpleAggregateFunction(sum, Float64),
    gaps            SimpleAggregateFunction(sum, UInt64),
    ttft_network    SimpleAggregateFunction(sum, UInt64),
    with_ttft       SimpleAggregateFunction(sum, UInt64),
    multi           SimpleAggregateFunction(sum, UInt64),
    one_read        SimpleAggregateFunction(sum, UInt64),
    steady          SimpleAggregateFunction(sum, UInt64),
    bursty          SimpleAggregateFunction(sum, UInt64),
    page_stalled    SimpleAggregateFunction(sum, UInt64),
    network_stalled SimpleAggregateFunction(sum, UInt64),
    origin_burst    SimpleAggregateFunction(sum, UInt64),
    origin_smooth   SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (site, dim, hour, value)
TTL hour + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rechunk_1h_mv TO itl_rechunk_1h AS
SELECT
    toStartOfHour(received_at) AS hour, site, d.1 AS dim, d.2 AS value,
    count() AS streams,
    sum(events) AS events,
    sum(reads) AS reads,
    sum(bytes) AS bytes,
    sumIf(toFloat64(sub_floor_share) * (content_events - 1), content_events >= 2) AS sub_floor_gaps,
    sumIf(content_events - 1, content_events >= 2) AS gaps,
    countIf(ttft_cause = 'network') AS ttft_network,
    countIf(ttft_us IS NOT NULL) AS with_ttft,
    countIf(content_events >= 3) AS multi,
    countIf(content_events >= 3 AND max_events_per_read >= content_events) AS one_read,
    countIf(content_events >= 3 AND max_events_per_read < content_events AND events_per_read >= 1.5
        AND max_events_per_read <= 2 * events_per_read) AS steady,
    countIf(content_events >= 3 AND max_events_per_read < content_events AND max_events_per_read >= 3
        AND max_events_per_read > 2 * events_per_read) AS bursty,
    countIf(content_events >= 3 AND stalls_page > 0) AS page_stalled,
    countIf(content_events >= 3 AND stalls_network > 0) AS network_stalled,
    toUInt64(0) AS origin_burst,
    toUInt64(0) AS origin_smooth
FROM itl_streams
ARRAY JOIN [('', ''), ('country', toString(country)), ('region', toString(region)), ('browser', toString(browser)),
    ('os', toString(os)), ('device', toString(device)), ('model', toString(model)), ('release', toString(release)),
    ('colo', toString(colo)), ('api_origin', toString(url_origin)), ('http_proto', toString(http_proto))] AS d
GROUP BY hour, site, dim, value;

CREATE MATERIALIZED VIEW IF NOT EXISTS itl_rechunk_1h_origin_mv TO itl_rechunk_1h AS
SELECT
    toStartOfHour(client_received_at) AS hour, site, d.1 AS dim, d.2 AS value,
    toUInt64(0) AS streams,
    toUInt64(0) AS events,
    toUInt64(0) AS reads,
    toUInt64(0) AS bytes,
    toFloat64(0) AS sub_floor_gaps,
    toUInt64(0) AS gaps,
    toUInt64(0) AS ttft_network,
    toUInt64(0) AS with_ttft,
    toUInt64(0) AS multi,
    toUInt64(0) AS one_read,
    toUInt64(0) AS steady,
    toUInt64(0) AS bursty,
    toUInt64(0) AS page_stalled,
    toUInt64(0) AS network_stalled,
    countIf(client_content_events >= 3 AND content_events >= 3 AND itl_zero >= 0.2 * (content_events - 1)) AS origin_burst,
    countIf(client_content_events >= 3 AND NOT (content_events >= 3 AND itl_zero >= 0.2 * (content_events - 1))) AS origin_smooth
FROM itl_origin
ARRAY JOIN [('', ''), ('country', toString(country)), ('region', toString(region)), ('browser', toString(browser)),
    ('os', toString(os)), ('device', toString(device)), ('model', toString(model)), ('release', toString(release)),
    ('colo', toString(colo)), ('api_origin', toString(url_origin)), ('http_proto', toString(http_proto))] AS d
WHERE version = 1
GROUP BY hour, site, dim, value;

-- itl_rechunk_1h_from: from which hour on itl_rechunk_1h holds every stream,
-- as itl_rollup_1h_from does for the hourly rollups (see there): the views
-- see only the inserts made after they were created, so on a database with
-- streams the hour after the later of the latest received_at and this
-- statement's clock is the first complete one (an origin timeline is
-- joined when its stream is promoted or later, so the joins of a stream
-- after it are made after the view too). Earlier hours are read from
-- itl_streams. An empty database is complete from the start.
CREATE TABLE IF NOT EXISTS itl_rechunk_1h_from
(
    complete_from DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY tuple()
AS SELECT if((SELECT count() FROM itl_streams) = 0, toDateTime(0, 'UTC'),
    toStartOfHour(greatest((SELECT toDateTime(max(received_at)) FROM itl_streams), now())) + INTERVAL 1 HOUR);
