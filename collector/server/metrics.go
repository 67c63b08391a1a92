package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/itlmon/itlmon/collector/store"
)

// registerStoreMetrics exports the writer's counters and gauges, and what
// its inserts cost ClickHouse.
func registerStoreMetrics(reg prometheus.Registerer, w *store.Writer, db *store.DB) {
	counter := func(name, help string, f func(store.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(w.Stats()) })
	}
	gauge := func(name, help string, f func(store.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(w.Stats()) })
	}
	reg.MustRegister(
		gauge("itlmon_store_queue_depth", "Batches waiting for the ClickHouse writer.",
			func(s store.Stats) float64 { return float64(s.QueueDepth) }),
		gauge("itlmon_store_queue_capacity", "Batches the writer queue holds before ingest blocks (backpressure).",
			func(s store.Stats) float64 { return float64(s.QueueCapacity) }),
		counter("itlmon_store_rows_inserted_total", "Records (client streams, origin timelines) inserted into the ClickHouse inbox, spool replays included; copies are dropped at promotion (itlmon_promote_copies_total).",
			func(s store.Stats) float64 { return float64(s.InboxRowsInserted) }),
		counter("itlmon_store_rows_spooled_total", "Records appended to the local spool while ClickHouse was unreachable.",
			func(s store.Stats) float64 { return float64(s.RowsSpooled) }),
		counter("itlmon_store_rows_replayed_total", "Records moved from the spool into ClickHouse.",
			func(s store.Stats) float64 { return float64(s.RowsReplayed) }),
		counter("itlmon_store_rows_failed_total", "Records neither inserted nor spooled (their batch was not acked).",
			func(s store.Stats) float64 { return float64(s.RowsFailed) }),
		counter("itlmon_store_rows_quarantined_total", "Spooled records ClickHouse refuses (not unreachable: it answers no), set aside in DATA/spool/quarantine.",
			func(s store.Stats) float64 { return float64(s.RowsQuarantined) }),
		counter("itlmon_store_spool_dropped_rows_total", "Spooled records deleted with the oldest spool segments to keep the spool within --spool-max (lost).",
			func(s store.Stats) float64 { return float64(s.RowsDropped) }),
		counter("itlmon_store_spool_dropped_bytes_total", "Bytes of spool segments deleted to keep the spool within --spool-max.",
			func(s store.Stats) float64 { return float64(s.BytesDropped) }),
		counter("itlmon_store_inserts_total", "Successful batch inserts into ClickHouse.",
			func(s store.Stats) float64 { return float64(s.Inserts) }),
		counter("itlmon_store_insert_errors_total", "Failed batch inserts into ClickHouse.",
			func(s store.Stats) float64 { return float64(s.InsertErrors) }),
		counter("itlmon_store_insert_seconds_total", "Time spent in successful inserts; divide by itlmon_store_inserts_total for the mean latency.",
			func(s store.Stats) float64 { return s.InsertSeconds }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "itlmon_store_insert_server_cpu_seconds_total",
			Help: "CPU (user + system) ClickHouse reported spending in the inbox inserts (their ProfileEvents), failed ones included; divide by itlmon_store_rows_inserted_total for its CPU per record. The merges the inserted parts cause later are not in it."},
			func() float64 { return db.InboxServerCPU().Seconds() }),
		gauge("itlmon_store_last_batch_rows", "Records in the last flushed batch.",
			func(s store.Stats) float64 { return float64(s.LastBatchRows) }),
		gauge("itlmon_store_spool_segments", "Spool segments waiting for replay.",
			func(s store.Stats) float64 { return float64(s.SpoolSegments) }),
		gauge("itlmon_store_spool_bytes", "Bytes in the spool waiting for replay.",
			func(s store.Stats) float64 { return float64(s.SpoolBytes) }),
	)
}
