package join

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// okSink stores nothing and acknowledges at once.
type okSink struct{}

func (okSink) SubmitRows(_ context.Context, _ []store.InboxRow, done func(error)) error {
	done(nil)
	return nil
}

// FuzzOriginHandler posts arbitrary bytes, site and key to POST
// /v1/origin (origin and edge timelines). Besides not crashing: only the
// right key gets past 403, a 204 is only for a body that decodes, and a
// body that decodes is stored (204), never refused as a storage failure
// (503), which the reporter would resend for ever. `go test` runs the seeds
// (f.Add and testdata/fuzz/FuzzOriginHandler); `make fuzz` explores.
func FuzzOriginHandler(f *testing.F) {
	const key = "fuzz-origin-key-0123456789"
	o := beacon.Origin{ID: "req-1", Vantage: beacon.VantageOrigin, StartUnixMs: 1_790_000_000_000, Route: "/v1/chat",
		Format: 1, Status: 1, HTTPStatus: 200, TTFBUs: 90_000, TTFTUs: 100_000, DurationUs: 900_000, Events: 2,
		ContentEvents: 2, Flushes: 2, MaxEventsPerFlush: 1, Bytes: 300, EmitUs: []uint32{100_000, 120_000}}
	good, err := (&beacon.OriginBatch{Seq: 1, Site: "chat", Records: []beacon.Origin{o}}).AppendBinary(nil)
	if err != nil {
		f.Fatal(err)
	}
	edge := o
	edge.Vantage, edge.Edge = beacon.VantageEdge, beacon.Edge{Colo: "FRA", ClientTCPRTTMs: beacon.NoTime, HeadersUs: 100}
	edgeBody, err := (&beacon.OriginBatch{Seq: 2, Records: []beacon.Origin{edge}}).AppendBinary(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "chat", key)
	f.Add(edgeBody, "chat", key)
	f.Add(good, "chat", key+"x")
	f.Add(good, "other", key)
	f.Add(good[:len(good)/2], "chat", key)
	f.Add([]byte{}, "chat", key)
	f.Add([]byte("ITL\x01\x00\x03garbage"), "chat", key)
	h := NewIntake(okSink{}, zerolog.Nop()).Handler(StaticKeys(map[string]secret.Token{"chat": secret.New(key)}))
	for _, body := range [][]byte{good, edgeBody} { // the seeds reach the store
		req := httptest.NewRequest("POST", origin.Path+"?site=chat", bytes.NewReader(body))
		req.Header.Set(origin.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 204 {
			f.Fatalf("seed: %d %s, want 204", w.Code, w.Body)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, site, k string) {
		req := httptest.NewRequest("POST", origin.Path, bytes.NewReader(body))
		q := req.URL.Query()
		q.Set("site", site)
		req.URL.RawQuery = q.Encode()
		req.Header.Set(origin.HeaderKey, k)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		authorized := site == "chat" && k == key
		_, decodeErr := beacon.DecodeOriginBatch(body, beacon.DefaultLimits)
		switch {
		case !authorized && w.Code != 403:
			t.Fatalf("site %q key %q: status %d, want 403", site, k, w.Code)
		case authorized && w.Code == 204 && decodeErr != nil:
			t.Fatalf("204 for a body that does not decode: %v", decodeErr)
		case authorized && w.Code == 422 && decodeErr != nil:
			t.Fatalf("422 (not storable) for a body that does not decode: %v", decodeErr)
		case authorized && w.Code == 503:
			t.Fatalf("a body that decodes (%v) refused as a storage failure: %s", decodeErr, w.Body)
		case authorized && w.Code != 204 && w.Code != 400 && w.Code != 413 && w.Code != 422:
			t.Fatalf("status %d %q", w.Code, w.Body)
		}
	})
}
