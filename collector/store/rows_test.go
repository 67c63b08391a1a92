package store

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// TestStreamRowNames: a row carries the plain names, how the body ended and
// the headers time, and reads back as the same codes. A sender older than
// End says none, and its headers time is what the decoder gave it (its first
// body byte: see beacon).
func TestStreamRowNames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		end       meter.End
		headersUs uint32
		wantEnd   string
		wantHdr   uint32 // beacon.NoTime: NULL
	}{
		{"headers", meter.EndBody, 80_000, "body_end", 80_000},
		{"before headers", meter.EndAbort, beacon.NoTime, "abort", beacon.NoTime},
		{"older sender", meter.EndNone, 90_000, "", 90_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s collector.Stream
			s.Format, s.Status, s.TTFTCause = uint8(meter.FormatAnthropic), uint8(meter.StatusAborted), uint8(meter.CausePage)
			s.End, s.HeadersUs = uint8(tc.end), tc.headersUs
			s.StallList = []beacon.Stall{{StartUs: 1, EndUs: 2, Cause: uint8(meter.CauseOrigin)}, {StartUs: 3, EndUs: 4, Cause: 77}}
			row := newStreamRow(&s)
			if got, want := []string{row.FormatName, row.StatusName, row.TTFTCauseName, row.EndReason},
				[]string{"anthropic", "aborted", "page", tc.wantEnd}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
				t.Errorf("format, status, ttft cause, end = %q, want %q", got, want)
			}
			if got, want := row.StallCauses, []string{"origin", "unknown"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("stall causes = %q, want %q", got, want)
			}
			if got := fromOptTime(row.HeadersUs); got != tc.wantHdr {
				t.Errorf("headers_us = %d, want %d", got, tc.wantHdr)
			}
			back, err := row.stream()
			if err != nil {
				t.Fatal(err)
			}
			if back.Format != s.Format || back.Status != s.Status || back.TTFTCause != s.TTFTCause || back.End != s.End ||
				back.HeadersUs != tc.wantHdr || back.StallList[0].Cause != uint8(meter.CauseOrigin) {
				t.Errorf("read back %+v", back.Record)
			}
			if got := meter.Name(meter.CauseNames[:], back.StallList[1].Cause); got != "unknown" {
				t.Errorf("an unknown cause reads back as %q, want unknown", got)
			}
		})
	}
}

// TestInboxColumnsOf: the written-out columns of inbox rows are the
// reflective ones, field for field (a field added to InboxRow and not to
// inboxColumnsOf fails here).
func TestInboxColumnsOf(t *testing.T) {
	rows := []InboxRow{
		{Kind: KindClient, Site: "a", StreamID: "s1", OriginID: "o1", ReceivedAt: time.Unix(1, 2).UTC(), Country: "DE", Region: "DE-BE",
			Browser: "Firefox", BrowserMajor: 133, OS: "Linux", Device: "desktop", Payload: "p1"},
		{Kind: KindOrigin, Site: "b", StreamID: "s2", ReceivedAt: time.Unix(3, 4).UTC(), Payload: "p2"},
	}
	got := inboxColumnsOf(rows)
	want := reflectColumns(rows)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("inboxColumnsOf = %v, want %v", got, want)
	}
	// In the room of an earlier block's columns (of more rows, other
	// values), the same columns.
	earlier := inboxColumnsOf([]InboxRow{rows[1], rows[0], rows[1]})
	if got := inboxColumnsInto(earlier, rows[:1]); !reflect.DeepEqual(got, reflectColumns(rows[:1])) {
		t.Fatalf("inboxColumnsInto = %v, want %v", got, reflectColumns(rows[:1]))
	}
}

// TestInboxBlocks: blocks made from the writer's parts (the rows of many
// Submits, some of them empty) are the blocks of the rows as one slice,
// whatever the block size, a block ending inside a part or at its end.
func TestInboxBlocks(t *testing.T) {
	var all []InboxRow
	var parts [][]InboxRow
	for i, n := range []int{3, 0, 1, 5, 0, 2, 4} {
		p := make([]InboxRow, n)
		for k := range p {
			p[k] = InboxRow{Kind: KindClient, Site: "s", StreamID: fmt.Sprintf("%d/%d", i, k), ReceivedAt: time.Unix(int64(i), int64(k)).UTC(),
				BrowserMajor: uint16(10*i + k), Payload: fmt.Sprintf("p%d.%d", i, k)}
		}
		parts, all = append(parts, p), append(all, p...)
	}
	for _, size := range []int{1, 2, 3, 4, 7, len(all)} {
		block := inboxBlocks(parts)
		var cols []any
		for k := 0; k < len(all); k += size {
			n := min(size, len(all)-k)
			cols = block(cols, k, n)
			if want := reflectColumns(all[k : k+n]); !reflect.DeepEqual(cols, want) {
				t.Fatalf("blocks of %d: block at row %d = %v, want %v", size, k, cols, want)
			}
		}
	}
}

// TestBatchRows: a batch's rows, made without streams, are the rows
// ClientRow makes of each of its streams (Batch.Streams), with and
// without wires; a record the encoder refuses is left out alone, with
// why.
func TestBatchRows(t *testing.T) {
	streams, frame := timelineStreams(t, 5, 30)
	checked, wire, _, err := beacon.CheckBatchWire(frame, beacon.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	shared := collector.Stream{Site: "demo", ReceivedAt: time.Unix(1700000000, 5e6).UTC(), Release: "r9", ModuleVersion: "0.9",
		ConnType: "4g", ConnRTTMs: 70, TimerFloorUs: 100, Country: "DE", Region: "DE-BE", Browser: "Firefox",
		BrowserMajor: 133, OS: "Linux", Device: "desktop"}
	for _, withWire := range []bool{true, false} {
		b := collector.Batch{Shared: shared, Records: checked.Records, Wires: wire}
		if !withWire {
			b.Records, b.Wires = nil, nil
			for i := range streams {
				b.Records = append(b.Records, streams[i].Record)
			}
		}
		b.Records = slices.Clone(b.Records)
		b.Records[2].Model = "gpt\xff" // not UTF-8: refused by either path
		rows, bad := batchRows(&b)
		if len(bad) != 1 || len(rows) != len(b.Records)-1 {
			t.Fatalf("wire %v: %d rows and %d errors, want %d and 1", withWire, len(rows), len(bad), len(b.Records)-1)
		}
		var want []InboxRow
		for _, s := range b.Streams() {
			if row, err := ClientRow(&s); err == nil {
				want = append(want, row)
			}
		}
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("wire %v: batch rows differ from the streams' rows", withWire)
		}
		got, err := rows[0].Client()
		if err != nil {
			t.Fatal(err)
		}
		if got.Country != "DE" || got.Release != "r9" || got.ConnRTTMs != 70 || got.ITL.Count() == 0 || len(got.Timeline) != 30 {
			t.Fatalf("wire %v: the row does not hold the batch's record with its shared fields: %+v", withWire, got)
		}
	}
}
