// Package benchreport holds the collector's measured reports in its tests
// (make bench): ingest against a direct insert, idle-connection memory,
// half-sent frames, the soak, and the dashboard's read endpoints over seeded
// streams. They run with ITLMON_BENCH_REPORT=1 and skip otherwise.
package benchreport
