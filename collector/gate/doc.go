// Package gate is `itlmon gate`: it turns streaming smoothness into a CI
// check that fails a build when streaming gets worse.
//
// Two sources produce the same report (query.Report):
//
//	itlmon gate probe URL [-H 'Authorization: Bearer $KEY'] [--concurrency 8] [--requests 40 | --duration 1m] [--warmup 4]
//	itlmon gate rum --site KEY [--since 1h] [--where country=DE ...] [--clickhouse DSN]
//
// probe is synthetic load from Go: each response body is read with a plain
// net/http client, every Read stamped on arrival and fed to wasm/meter exactly
// as the browser module feeds it, so TTFT, ITL, TPOT and jank mean the same
// thing as the real-user numbers (definitions in package query). Per-stream
// ITL histograms are merged; TTFT and tokens/s quantiles are exact over
// streams. rum reads the same numbers from ClickHouse's rollups (per minute and per hour).
//
// Thresholds (DefaultThresholds; flags): --min-tps-p50 10, --max-itl-p99
// 250ms, --max-jank 5, and when given --max-ttft-p95, --max-stall-share,
// --max-before-headers-share (requests aborted or failed before the response
// headers: the user gave up, or the network failed, before the first byte)
// and (probe) --max-error-share (default 0: any failed request fails the
// gate).
// The gate judges chunk ITL, what the reader sees; token-normalised ITL is
// reported beside it, never mixed in.
//
// Output: a table on stdout (or --json), --junit FILE for CI systems, a
// progress bar on stderr when it is a terminal. Exit status: 0 every check
// passed, 1 a threshold failed (the report names it and by how much), 2 usage,
// connection or no-data errors, with a message saying what to fix. Header
// values, URL credentials and query strings are never printed.
package gate
