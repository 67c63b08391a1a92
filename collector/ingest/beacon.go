package ingest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// ServeBeacon is the POST /v1/beacon handler: the same batch bytes as a
// WebSocket frame, sent by navigator.sendBeacon when the page goes away. It
// answers 204 only once the batch is durable; any other status carries the
// reason as text.
func (h *Handler) ServeBeacon(w http.ResponseWriter, r *http.Request) {
	s, status, reason, text := h.admit(r)
	if s == nil {
		h.reject(reason, text)
		// Readable from any origin (without credentials): the browser
		// module asks here why its WebSocket keeps failing, and stops
		// for good on an unknown site or a refused origin.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		http.Error(w, text, status)
		return
	}
	h.corsHeaders(w, r)
	// Reserve the body on the memory budget before reading it: on its
	// declared length, or the limit when it declares none.
	hold := int64(h.limits.MaxBytes) + 1
	if r.ContentLength >= 0 && r.ContentLength < hold {
		hold = r.ContentLength
	}
	if !h.budget.reserve(hold) {
		h.shedPost(w, ShedMemory, hold, "collector over its ingest memory budget")
		return
	}
	defer func() { h.budget.release(hold) }()
	// Not every ResponseWriter has a deadline (a recorder in a test): then
	// the server's ReadTimeout is the only bound.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.bodyWait))
	body, err := readLimited(nil, http.MaxBytesReader(w, r.Body, int64(h.limits.MaxBytes)+1), h.limits.MaxBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.Is(err, errTooBig) || errors.As(err, &mbe) {
			text := fmt.Sprintf("batch too big: over %d bytes", h.limits.MaxBytes)
			h.reject(ReasonTooBig, text)
			http.Error(w, text, http.StatusRequestEntityTooLarge)
			return
		}
		// A deadline passed or the client cut the body off: either way the
		// batch did not arrive, and the client (if still there) may resend.
		text := fmt.Sprintf("batch body not received in full within %v", h.bodyWait)
		// Not err's text: it names the client's address.
		how := "cut off"
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			how = "stalled"
		}
		h.reject(ReasonBodyTimeout, text+" ("+how+")")
		w.Header().Set("Connection", "close")
		http.Error(w, text, http.StatusRequestTimeout)
		return
	}
	if !h.acquireCPU(r.Context().Done()) {
		return
	}
	sc := getScratch()
	defer putScratch(sc) // the sink keeps nothing of the batch past Submit
	b, wire, bad, err := sc.dec.CheckBatchWire(body, h.limits)
	h.releaseCPU()
	if err != nil {
		reason, _ := classifyDecode(err)
		text := "bad batch: " + err.Error()
		h.reject(reason, text)
		status := http.StatusBadRequest
		if reason == ReasonTooBig {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, text, status)
		return
	}
	h.m.batches.WithLabelValues("beacon").Inc()
	if b.Site != "" && b.Site != s.key {
		text := "batch is for site " + quoteShort(b.Site) + ", request for " + s.key
		h.reject(ReasonSiteMismatch, text)
		http.Error(w, text, http.StatusForbidden)
		return
	}
	h.rejectRecords(bad)
	n := len(b.Records)
	h.m.batchRecords.Observe(float64(n))
	if b.Dropped > 0 {
		h.m.clientDropped.Add(float64(b.Dropped))
	}
	if n == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	now := h.now()
	// A beacon has no connection bucket; the site bucket alone applies.
	wait, ok, text := h.rateLimit(s, nil, n, now)
	if !ok {
		h.reject(ReasonRateLimit, text)
		w.Header().Set("Retry-After", strconv.Itoa(h.rateRetry()))
		http.Error(w, text, http.StatusTooManyRequests)
		return
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	// The decoded batch is held until the answer.
	extra := batchCost(len(body), n) - hold
	h.budget.force(extra)
	hold += extra
	done := make(chan error, 1)
	began := time.Now()
	// The request's context and QueueWait bound the wait for queue space;
	// once queued, the batch is stored even if the client goes away.
	ctx, cancel := context.WithTimeout(r.Context(), h.queueWait)
	err = h.handOver(ctx, func() error {
		batch := h.batch(&sc.out, b, wire, s, r.Header, r.RemoteAddr, nil, now)
		return h.sink.Submit(ctx, batch, func(err error) { done <- err })
	})
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			h.shedPost(w, ShedQueue, int64(len(body)), "storage queue full")
			return
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return // client gone
		}
		h.reject(ReasonStore, err.Error())
		http.Error(w, "storage unavailable: resend later", http.StatusServiceUnavailable)
		return
	}
	h.m.accepted.Add(float64(n))
	s.records.Add(float64(n))
	if err := <-done; err != nil {
		h.reject(ReasonStore, err.Error())
		http.Error(w, "storage failed, batch not stored: resend it", http.StatusServiceUnavailable)
		return
	}
	h.m.ackLatency.Observe(time.Since(began).Seconds())
	h.m.acked.Add(float64(n))
	w.WriteHeader(http.StatusNoContent)
}

// shedPost answers 503 with Retry-After: the batch is not taken, the
// client keeps it and comes back after the delay.
func (h *Handler) shedPost(w http.ResponseWriter, cause string, bytes int64, why string) {
	h.m.shed.WithLabelValues("beacon", cause).Inc()
	h.m.shedBytes.Add(float64(bytes))
	text := h.retryText(why)
	h.reject(ReasonShed, text)
	w.Header().Set("Retry-After", strconv.Itoa(h.retry))
	w.Header().Set("Connection", "close") // the body was not read
	http.Error(w, text, http.StatusServiceUnavailable)
}

// serveBeaconPreflight answers the CORS preflight a browser sends before a
// cross-origin POST with a non-simple Content-Type.
func (h *Handler) serveBeaconPreflight(w http.ResponseWriter, r *http.Request) {
	s, status, reason, text := h.admit(r)
	if s == nil {
		h.reject(reason, text)
		http.Error(w, text, status)
		return
	}
	h.corsHeaders(w, r)
	w.Header().Set("Access-Control-Allow-Methods", "POST")
	w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
	w.Header().Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
}

// corsHeaders allows the (already admitted) Origin; sendBeacon sends
// credentials, so the origin is echoed, never "*".
func (h *Handler) corsHeaders(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" {
		w.Header().Set("Access-Control-Allow-Origin", o)
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		w.Header().Add("Vary", "Origin")
	}
}
