-- 011: the views whose queries 006 and 009 changed keep one identity in the
-- deduplication of their inserts, before and after the server restarts.
--
-- Why: the promoter's inserts into itl_streams and itl_origin carry a token
-- (007_inbox.sql), and each view's block into its target is deduplicated
-- by a token derived from it and from the view's identity as the server
-- holds it. After ALTER ... MODIFY QUERY the server holds a view under
-- another identity than the one it loads from its metadata at the next
-- start, until that start. A promotion cut by a restart of the server (an
-- engine that died, a server upgraded) and run again after it then inserts
-- the blocks of those views again: itl_rollup_1m and itl_origin_1m counted
-- that window twice (measured: 6 streams more than itl_streams on a shard
-- killed during a promotion right after the schema was made; views never
-- altered, such as itl_rollup_1h's, were not affected).
--
-- A rename in place (to a passing name and back, in one statement) makes
-- the server hold each view as it loads it at a start: the tokens are those
-- of every later start. The views feed their targets throughout, under one
-- name or the other; a block inserted in the instant between the two names
-- carries the passing name, which matters only if that very promotion is
-- cut and run again. Re-running renames again, with the same result; a
-- statement cut between its two renames is completed by the migration
-- runner (schema.RenameInPlace).
--
-- The rule for later files: a view whose query a file changes with MODIFY
-- QUERY is renamed in place after it, in that file (schema's
-- TestModifiedViewsRenamed checks every file).
RENAME TABLE itl_rollup_1m_mv TO itl_rollup_1m_mv_renaming, itl_rollup_1m_mv_renaming TO itl_rollup_1m_mv;
RENAME TABLE itl_rollup_1m_cause_mv TO itl_rollup_1m_cause_mv_renaming, itl_rollup_1m_cause_mv_renaming TO itl_rollup_1m_cause_mv;
RENAME TABLE itl_origin_1m_mv TO itl_origin_1m_mv_renaming, itl_origin_1m_mv_renaming TO itl_origin_1m_mv;
