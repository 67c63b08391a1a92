package store_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/benchrec"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// checkingInbox checks every row it is given against the record sent with
// its stream id, and fails insert number fail (its rows are then spooled,
// and replayed by a later insert).
type checkingInbox struct {
	mu      sync.Mutex
	want    map[string][]byte // stream id -> the encoder's batch of one of the record sent
	seen    map[string]int
	inserts int
	fail    int
	bad     []error
}

func (*checkingInbox) SchemaReady() error { return nil }

func (in *checkingInbox) InsertInbox(_ context.Context, parts ...[]store.InboxRow) error {
	rows := slices.Concat(parts...)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.inserts++
	for i := range rows {
		r := &rows[i]
		want, ok := in.want[r.StreamID]
		if !ok || r.Payload != string(want) {
			in.bad = append(in.bad, fmt.Errorf("insert %d, row %d (stream %x): payload is not the record sent with its id", in.inserts, i, r.StreamID))
		}
	}
	if in.inserts == in.fail {
		return errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	for i := range rows {
		in.seen[strings.Clone(rows[i].StreamID)]++ // the row's bytes are reused once it is done
	}
	return nil
}

// TestSubmitRowsAsSent: batches submitted as ingest submits them (their
// records checked with their wires, the records' memory reused for the
// next batch once Submit returns) are stored with each row's stream id and
// payload those of its own record (both are built in the batch's arena):
// many batches from several goroutines, inserts of a few batches each, one
// of them failing (spooled, replayed later).
func TestSubmitRowsAsSent(t *testing.T) {
	const submitters, batches, perBatch = 4, 60, 20
	in := &checkingInbox{want: map[string][]byte{}, seen: map[string]int{}, fail: 3}
	w, err := store.NewWriterOn(in, store.WriterOptions{SpoolDir: t.TempDir(), MinRows: 50, MaxRows: 200,
		FlushInterval: 20 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	client := beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}
	frames := make([][][]byte, submitters)
	for s := range frames {
		for k := range batches {
			bt := beacon.Batch{Seq: uint64(k + 1), Client: client}
			for i := range perBatch {
				r := beacon.Record{StartUnixMs: 1_790_000_000_000, PageOrigin: "https://chat.example.com",
					PagePath: fmt.Sprintf("/chat/%d", (s+k+i)%3), URLOrigin: "https://api.example.com",
					URLPath: "/v1/chat/completions", Model: fmt.Sprintf("model-%d", k%5), HTTPStatus: 200}
				r.StreamID[0], r.StreamID[1], r.StreamID[2] = byte(s), byte(k), byte(i)
				if i%2 == 0 {
					benchrec.Answer(&r, mrand.New(mrand.NewPCG(uint64(s), uint64(k*perBatch+i))))
				}
				one, err := (&beacon.Batch{Site: "test", Client: client, Records: []beacon.Record{r}}).AppendBinary(nil)
				if err != nil {
					t.Fatal(err)
				}
				in.want[string(r.StreamID[:])] = one
				bt.Records = append(bt.Records, r)
			}
			p, err := bt.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			frames[s] = append(frames[s], p)
		}
	}
	var wg sync.WaitGroup
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc beacon.Scratch
			for _, frame := range frames[s] {
				b, wire, bad, err := sc.CheckBatchWire(frame, beacon.Limits{})
				if err != nil || len(bad) > 0 {
					t.Error(err, bad)
					return
				}
				cb := collector.Batch{Records: b.Records, Wires: wire}
				cb.Shared = collector.Stream{Site: "test", ReceivedAt: time.Unix(1_790_000_000, 0).UTC(), ConnType: client.ConnType,
					Release: client.Release, ModuleVersion: client.ModuleVersion, Country: "DE", Region: "unknown",
					Browser: "Firefox", OS: "Linux", Device: "desktop"}
				acked := make(chan error, 1)
				if err := w.Submit(context.Background(), &cb, func(err error) { acked <- err }); err != nil {
					t.Error(err)
					return
				}
				// Like ingest: the frame's records are reused for the next
				// frame once Submit returns; half the time the next is sent
				// before this one's ack.
				if len(frame)%2 == 0 {
					if err := <-acked; err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	poll.Until(30*time.Second, 20*time.Millisecond, func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return len(in.seen) == submitters*batches*perBatch
	})
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.bad) > 0 {
		t.Fatalf("%d rows not as sent, the first: %v", len(in.bad), in.bad[0])
	}
	if len(in.seen) != submitters*batches*perBatch {
		t.Fatalf("%d of %d streams inserted (%+v)", len(in.seen), submitters*batches*perBatch, w.Stats())
	}
	if st := w.Stats(); st.RowsSpooled == 0 {
		t.Fatalf("no insert failed and was spooled: the test did not take rows through the spool (%+v)", st)
	}
}
