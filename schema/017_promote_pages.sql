-- 017: itl_promote_pages, the page size each window of more than 100 records
-- is promoted in, recorded before its first page.
--
-- Why: a promoter inserts a window page by page, and each page's inserts
-- carry a token of the window, the page size and the page
-- (collector/promoter/promote.go), so a rerun after a cut is deduplicated
-- page by page. A rerun must page the window as the cut run did: with
-- another size its pages hold other rows, and its tokens either drop rows
-- (the same token on other rows) or store them twice. So the first promoter
-- to start such a window records the size it pages it in, with a token of
-- the window: when two start it at once, ClickHouse keeps one row (the
-- other insert is deduplicated) and both read that one back. Whoever
-- finishes the window pages it the same way, whatever its own setting.
-- Pages carry their size in their tokens, except the one page of a window
-- of at most 2,000 records, which is the whole window under any size (and
-- was under the earlier releases): it keeps the window's own token.
--
-- legacy: the window was started by a collector of a release before this
-- table (pages of 2,000 rows, the first page with the window's own token):
-- it is finished the same way.
--
-- A window of at most 100 records (the smallest page size a collector
-- takes, --promote-page-rows) is not recorded: its one page is the whole
-- window under any size. Kept 7 days, as itl_promoted_ids (past the inbox's 2: a
-- window is promoted from its inbox rows).
CREATE TABLE IF NOT EXISTS itl_promote_pages
(
    promoted_window DateTime('UTC'),
    page_rows       UInt32,
    legacy          Bool,
    collector       LowCardinality(String),  -- the promoter whose row landed
    recorded_at     DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(promoted_window)
ORDER BY promoted_window
TTL promoted_window + INTERVAL 7 DAY
SETTINGS non_replicated_deduplication_window = 10000;
