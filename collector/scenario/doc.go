// Package scenario holds the collector's end-to-end scenarios in its tests:
// the real program (in-process, or the itlmon binary as a process for kills)
// with the real ClickHouse engine: ingest stored exactly once, ClickHouse
// outages, rejections, crashes after acks, kills hunting the cut in every
// insert, and stateless and cluster collectors sharing one ClickHouse.
package scenario
