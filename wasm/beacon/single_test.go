package beacon

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// singles are the one-record batches of every record of b (decoded from
// src), by AppendRecordBatch.
func singles(t tb, src []byte) (*Batch, [][]byte) {
	t.Helper()
	b, wire, _, err := DecodeBatchWire(src, bigLimits)
	if err != nil {
		t.Fatalf("DecodeBatchWire: %v", err)
	}
	if len(wire) != len(b.Records) {
		t.Fatalf("%d wires for %d records", len(wire), len(b.Records))
	}
	var out [][]byte
	for i := range b.Records {
		p, err := AppendRecordBatch(nil, b.Site, &b.Client, &b.Records[i], wire[i])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		out = append(out, p)
	}
	return b, out
}

// TestAppendRecordBatch: from a canonical batch, the one-record batch
// copied from the wire is byte for byte the one the encoder writes, with
// the strings as the caller has them.
func TestAppendRecordBatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		src := mustEncode(t, genBatch(t))
		b, ones := singles(t, src)
		for i, p := range ones {
			want := mustEncode(t, &Batch{Site: b.Site, Client: b.Client, Records: []Record{b.Records[i]}})
			if !bytes.Equal(p, want) {
				t.Fatalf("record %d: AppendRecordBatch differs from the encoder's batch of one", i)
			}
		}
		if len(b.Records) == 0 {
			return
		}
		// A string changed after decoding is written as changed.
		_, wire, _, _ := DecodeBatchWire(src, bigLimits)
		r := b.Records[0]
		r.PagePath, r.Model = "/other/path", "another-model"
		p, _ := AppendRecordBatch(nil, b.Site, &b.Client, &r, wire[0])
		if !bytes.Equal(p, mustEncode(t, &Batch{Site: b.Site, Client: b.Client, Records: []Record{r}})) {
			t.Fatal("changed strings: AppendRecordBatch differs from the encoder's batch of one")
		}
		// Cloned wires no longer depend on the message's buffer.
		CloneWires(wire)
		clear(src)
		p2, _ := AppendRecordBatch(nil, b.Site, &b.Client, &r, wire[0])
		if !bytes.Equal(p2, p) {
			t.Fatal("cloned wire: batch of one differs after the message's buffer was cleared")
		}
	})
}

// TestAppendRecordBatchVersions: records of an older minor (fewer fields)
// and of a newer one (fields this decoder skips, unknown flag bits) keep
// their minor, and decode to the records of the batch they came in.
func TestAppendRecordBatchVersions(t *testing.T) {
	for _, e := range []encoder{{minor: 0}, {minor: 1}, {minor: Minor + 1, extra: []byte{0xde, 0xad}}} {
		src := reencode(t, typicalBatch(), e)
		b, ones := singles(t, src)
		for i, p := range ones {
			if p[4] != e.minor {
				t.Fatalf("minor %d: batch of one has minor %d", e.minor, p[4])
			}
			got := mustDecode(t, p, bigLimits)
			want := &Batch{Site: b.Site, Client: b.Client, Records: []Record{b.Records[i]}}
			if !batchesEqual(got, want) {
				t.Fatalf("minor %d, record %d: decodes to %+v, want %+v", e.minor, i, normalized(got), normalized(want))
			}
		}
	}
}

// TestAppendRecordBatchRefuses: no wire, or a string the encoder refuses,
// appends nothing.
func TestAppendRecordBatchRefuses(t *testing.T) {
	b, wire, _, err := DecodeBatchWire(mustEncode(t, typicalBatch()), bigLimits)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := AppendRecordBatch([]byte{1}, b.Site, &b.Client, &b.Records[0], Wire{}); !errors.Is(err, ErrNoWire) || !bytes.Equal(p, []byte{1}) {
		t.Fatalf("zero Wire: appended %x, error %v, want ErrNoWire", p, err)
	}
	r := b.Records[0]
	r.PagePath = "/chat?q=secret"
	p, err := AppendRecordBatch(nil, b.Site, &b.Client, &r, wire[0])
	var de *DecodeError
	if len(p) > 0 || !errors.As(err, &de) || !errors.Is(err, ErrInvalid) || de.Field != "page_path" {
		t.Fatalf("path with a query: appended %d bytes, error %v, want ErrInvalid for page_path", len(p), err)
	}
	// The encoder refuses the same string with the same error.
	if _, encErr := (&Batch{Site: b.Site, Client: b.Client, Records: []Record{r}}).AppendBinary(nil); fmt.Sprint(encErr) != fmt.Sprint(err) {
		t.Fatalf("AppendRecordBatch: %v; the encoder: %v", err, encErr)
	}
}
