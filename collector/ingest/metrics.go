package ingest

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ingest side's Prometheus metrics. The store reports its
// own (queue depth, insert latency, spool depth, deduplicated rows).
type metrics struct {
	connections      prometheus.Gauge
	connectionsTotal prometheus.Counter
	batches          *prometheus.CounterVec // transport
	accepted         prometheus.Counter     // records decoded and handed to the store
	acked            prometheus.Counter     // records acknowledged as durable
	rejected         *prometheus.CounterVec // reason
	clientDropped    prometheus.Counter
	batchRecords     prometheus.Histogram
	ackLatency       prometheus.Histogram
	shed             *prometheus.CounterVec // transport, cause
	shedBytes        prometheus.Counter
	siteRecords      *prometheus.CounterVec // site: records handed to the store
	siteLimited      *prometheus.CounterVec // site, budget: records refused by a rate budget
}

// Rate budgets: the label values of itlmon_ingest_site_rate_limited_records_total{budget}.
const (
	BudgetSite       = "site"       // the site's records/s, all connections and POSTs together (--site-rate)
	BudgetConnection = "connection" // one WebSocket connection's records/s (--conn-rate)
)

// Shed causes: the label values of itlmon_ingest_shed_total{cause}.
const (
	ShedMemory = "memory" // the frame or body did not fit in Config.Memory
	ShedQueue  = "queue"  // the sink's queue had no room within Config.QueueWait
)

func newMetrics(reg prometheus.Registerer, b *budget) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "itlmon_ingest_connections",
			Help: "Open WebSocket connections.",
		}),
		connectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "itlmon_ingest_connections_total",
			Help: "WebSocket connections accepted (upgraded).",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "itlmon_ingest_batches_total",
			Help: "Beacon batches decoded, by transport (ws, beacon).",
		}, []string{"transport"}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "itlmon_ingest_records_accepted_total",
			Help: "Stream records decoded, enriched and handed to the store.",
		}),
		acked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "itlmon_ingest_records_acked_total",
			Help: "Stream records acknowledged to the client after they were durable.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "itlmon_ingest_rejected_total",
			Help: "Requests, connections and frames rejected, by reason.",
		}, []string{"reason"}),
		clientDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "itlmon_ingest_client_dropped_records_total",
			Help: "Records the browser module reported it dropped before sending (its queue was full).",
		}),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "itlmon_ingest_batch_records",
			Help:    "Records per received beacon batch.",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500},
		}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "itlmon_ingest_ack_latency_seconds",
			Help:    "Time from handing a batch to the store until it was durable.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "itlmon_ingest_shed_total",
			Help: "WebSocket connections closed with 1013 and POSTs answered 503 to shed load, by transport (ws, beacon) and cause (memory, queue).",
		}, []string{"transport", "cause"}),
		shedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "itlmon_ingest_shed_bytes_total",
			Help: "Bytes refused by shedding: the declared length of the frame or body that did not fit, or the frame whose batch the queue had no room for.",
		}),
	}
	m.siteRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itlmon_ingest_site_records_total",
		Help: "Stream records decoded, enriched and handed to the store, by site (configured sites only).",
	}, []string{"site"})
	m.siteLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itlmon_ingest_site_rate_limited_records_total",
		Help: "Stream records refused by a rate budget (WebSocket close 1013, HTTP 429; the module resends them later), by site and budget (site, connection).",
	}, []string{"site", "budget"})
	memory := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "itlmon_ingest_memory_bytes",
		Help: "Bytes ingest holds against its budget: frames being read (their declared length), bodies, batches not yet acked.",
	}, func() float64 { return float64(b.used.Load()) })
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "itlmon_ingest_memory_budget_bytes",
		Help: "The ingest memory budget (--ingest-memory).",
	}, func() float64 { return float64(b.limit) })
	reg.MustRegister(m.connections, m.connectionsTotal, m.batches, m.accepted, m.acked,
		m.rejected, m.clientDropped, m.batchRecords, m.ackLatency, m.shed, m.shedBytes, m.siteRecords, m.siteLimited, memory, limit)
	for _, tr := range []string{"ws", "beacon"} {
		for _, cause := range []string{ShedMemory, ShedQueue} {
			m.shed.WithLabelValues(tr, cause)
		}
	}
	for _, r := range allReasons {
		m.rejected.WithLabelValues(r) // export zeros so rate() works from the start
	}
	return m
}
