-- 007: stateless collectors, every record stored exactly once.
--
-- Before: each collector inserted straight into itl_streams and kept the
-- origin/client join in its memory. A record resent after a lost ack, or
-- delivered to two collectors, or replayed from a spool after a crash, could
-- be stored twice (and the rollups, fed per insert by materialized views,
-- count it twice or, after a crash between parts, not at all), and a client
-- record on one collector never met its origin timeline on another.
--
-- Now: collectors only land records in itl_inbox (at least once: copies are
-- allowed there), and a promoter (collector/join.Promoter, run by every
-- collector, for every shard) turns the inbox into the tables users read, one
-- window of ingested_at at a time, exactly once:
--
--   * Windows are one second of ingested_at on a fixed grid. A window is
--     promoted only once it is sealed: the server clock is past its end plus
--     the join hold plus a grace, and no INSERT into itl_inbox that began
--     before its end plus the hold is still running (system.processes).
--     ingested_at is the server's now64() of the INSERT, constant per query,
--     so a sealed window's inbox rows never change again.
--   * Promoting window k reads its rows, keeps one copy of each record
--     (the first by ingested_at, then content), drops records already
--     promoted in earlier windows (itl_promoted_ids), joins client and
--     origin records (an origin timeline that reached the inbox up to the
--     hold after its client refines the client's itl_streams row), and
--     inserts into itl_timelines, itl_streams, itl_origin and
--     itl_promoted_ids, each insert with insert_deduplication_token derived
--     from k and the table, and deduplicate_blocks_in_dependent_materialized_views.
--     The inputs are sealed, so the blocks are the same on any rerun by any
--     collector: a promotion cut anywhere is completed by running it again,
--     which inserts what was missing (materialized view targets included) and
--     nothing twice. itl_promoted records that k is done.
--
-- So itl_streams, itl_timelines and the rollups hold each record once and are
-- read without FINAL; itl_origin keeps two versions of a row (FINAL, as before).

-- itl_inbox: records as they arrived, kept 2 days (for joins with records
-- promoted earlier, and for an operator). payload is the record in the
-- beacon wire format (a batch of one client record with its client facts, or
-- an origin batch of one timeline); the enrichment travels in columns. Never
-- client IPs, prompts or answers: only what the beacon carries.
CREATE TABLE IF NOT EXISTS itl_inbox
(
    kind          LowCardinality(String),      -- 'client' | 'origin'
    site          LowCardinality(String),
    stream_id     String,                      -- the record's id: the browser's stream id, or the origin timeline's id
    origin_id     String,                      -- the join key: the id the origin gave the response ('' if none)
    received_at   DateTime64(3, 'UTC'),        -- when a collector accepted it
    ingested_at   DateTime64(6, 'UTC') DEFAULT now64(6), -- the INSERT's server time: the promotion window
    country       LowCardinality(String),
    region        LowCardinality(String),
    browser       LowCardinality(String),
    browser_major UInt16,
    os            LowCardinality(String),
    device        LowCardinality(String),
    payload       String CODEC(ZSTD(1)),
    INDEX origin_id_bf origin_id TYPE bloom_filter(0.01) GRANULARITY 4
)
ENGINE = MergeTree
PARTITION BY toDate(ingested_at)
ORDER BY ingested_at
TTL toDateTime(ingested_at) + INTERVAL 2 DAY
SETTINGS ttl_only_drop_parts = 1, fsync_after_insert = 1, fsync_part_directory = 1;

-- A cluster shards it by the join key (origin_id, else stream_id), so a
-- stream's client record and origin timeline meet on one shard.

-- itl_promoted_ids: every promoted record, by the window that promoted it:
-- kind 'client' (stream_id: the browser's stream id), 'origin' (the origin
-- timeline's id), and 'join' (the origin id of a timeline joined with its
-- browser record: a timeline joins one record, once). A record whose id is
-- here with an earlier window is a copy (dropped); kept 7 days, the longest
-- dedup window a collector accepts.
CREATE TABLE IF NOT EXISTS itl_promoted_ids
(
    kind            LowCardinality(String),
    site            LowCardinality(String),
    stream_id       String,
    promoted_window DateTime('UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(promoted_window)
ORDER BY (stream_id, kind, site)
TTL promoted_window + INTERVAL 7 DAY
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1;

-- itl_promoted: one row per promoted window (the watermark is the latest),
-- inserted with the window's token like the other outputs: a rerun or a
-- second promoter adds none (within the deduplication window); its counts
-- are those of the first run (the same, the inputs being sealed).
CREATE TABLE IF NOT EXISTS itl_promoted
(
    promoted_window DateTime('UTC'),
    promoted_at     DateTime64(3, 'UTC') DEFAULT now64(3),
    records         UInt32,                    -- inbox rows in the window
    streams         UInt32,                    -- client records promoted
    origins         UInt32,                    -- origin timelines promoted
    copies          UInt32,                    -- copies dropped
    joined          UInt32,                    -- client/origin joins made
    collector       LowCardinality(String)      -- the promoter whose row landed first
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(promoted_window)
ORDER BY promoted_window
TTL promoted_window + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- itl_promoters: each running promoter's heartbeat (every 2 s). The one
-- with the smallest id among those seen in the last 10 s promotes; the
-- others promote only when the watermark lags more than 10 s (the leader
-- is gone or stuck). Correctness never depends on it (the tokens do): it
-- keeps N collectors from doing the promotion N times.
CREATE TABLE IF NOT EXISTS itl_promoters
(
    collector String,
    seen      DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
PARTITION BY toDate(seen)
ORDER BY (seen, collector)
TTL toDateTime(seen) + INTERVAL 1 DAY;

-- The promoter's tokens need a deduplication window on every table it
-- inserts into, materialized view targets included, large enough for a
-- rerun (a window's inserts are one block per partition per table).
ALTER TABLE itl_timelines MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE itl_streams MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE itl_origin MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE itl_rollup_1m MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE itl_origin_1m MODIFY SETTING non_replicated_deduplication_window = 10000;

-- The writer's dedup check is gone (itl_promoted_ids does it, exactly).
DROP VIEW IF EXISTS itl_stream_ids_mv;
DROP TABLE IF EXISTS itl_stream_ids;
