package beacon

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// timelineBoth reads n entries of src in units of unit the fast way and
// entry by entry, and fails t unless the fast way, when it takes them,
// finds what the entry-by-entry reading does (the same stamps, the same
// end, with and without a destination). It returns whether the fast way
// took them.
func timelineBoth(t *testing.T, src []byte, n int, unit int64) bool {
	t.Helper()
	slow := reader{src: src, rec: -1}
	want := make([]Stamp, n)
	slow.timeline(n, unit, want)
	got := make([]Stamp, n)
	end, ok := timelineFast(src, n, unit, got)
	if end2, ok2 := timelineFast(src, n, unit, nil); end2 != end || ok2 != ok {
		t.Fatalf("timeline %x (%d entries, unit %d): the fast way ends at %d (%v) with stamps, at %d (%v) without", src, n, unit, end, ok, end2, ok2)
	}
	if !ok {
		return false
	}
	if slow.err != nil {
		t.Fatalf("timeline %x (%d entries, unit %d): the fast way takes it, the entry-by-entry reading refuses it: %v", src, n, unit, slow.err)
	}
	if end != slow.p || !slices.Equal(got, want) {
		t.Fatalf("timeline %x (%d entries, unit %d): the fast way ends at %d with %v, the entry-by-entry reading at %d with %v", src, n, unit, end, got, slow.p, want)
	}
	return true
}

// TestTimelineFast: timelines of every entry size the fast way reads (time
// steps of one to four bytes, forward and back, each read code, read steps
// of one byte) are taken by it with the entry-by-entry reading's result;
// those it does not read (five-byte steps, longer read steps) and broken
// ones (a byte changed, cut, a unit that overflows, the count off) it
// takes only when the entry-by-entry reading accepts them alike.
func TestTimelineFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		units := [...]int64{1, 5, 100, 1000, 1 << 20}
		unit := units[rng.IntN(len(units))]
		n := 1 + rng.IntN(70)
		var src []byte
		fast := true       // every entry is of the kind the fast way reads
		var at, read int64 // the entries step from 0
		for range n {
			var d int64
			switch k := rng.IntN(12); {
			case k < 4:
				d = int64(rng.IntN(8)) // one byte
			case k < 7:
				d = int64(rng.IntN(1 << 10)) // two
			case k < 9:
				d = int64(rng.IntN(1 << 17)) // three
			case k < 10:
				d = int64(rng.IntN(1 << 24)) // four
			case k < 11:
				d = -int64(rng.IntN(1 << 10)) // back (a clock's correction)
			default:
				d = int64(1<<24 + rng.IntN(1<<26)) // five bytes: not the fast way's
			}
			if a := at + d*unit; a < 0 || a > 1<<32-1 {
				d = 0
			}
			at += d * unit
			v := (uint64(d<<1) ^ uint64(d>>63)) << 3
			var dr int64
			switch rng.IntN(3) {
			case 1:
				v |= 1 << 1
				dr = 1
			case 2:
				v |= 2 << 1
				dr = int64(rng.IntN(100)) - 20
				if read+dr < 0 {
					dr = 0
				}
				if dr < -64 || dr > 63 { // two bytes
					fast = false
				}
			}
			read += dr
			v |= uint64(rng.IntN(2)) // content
			if v >= 1<<28 {
				fast = false
			}
			src = appendUvarint(src, v)
			if v>>1&3 == 2 {
				src = appendVarint(src, dr)
			}
		}
		src = append(src, byte(rng.IntN(256)), byte(rng.IntN(256))) // the record's next fields
		if took := timelineBoth(t, src, n, unit); took != fast {
			t.Fatalf("timeline %x (%d entries, unit %d): the fast way takes it: %v, want %v", src, n, unit, took, fast)
		}
		broken, bn, bu := bytes.Clone(src), n, unit
		switch rng.IntN(5) {
		case 0:
			broken[rng.IntN(len(broken))] = byte(rng.IntN(256))
		case 1:
			broken[rng.IntN(len(broken))] |= 0x80
		case 2:
			broken = broken[:rng.IntN(len(broken))]
		case 3:
			bn = max(1, n+rng.IntN(5)-2)
		case 4:
			bu = unit << (8 + rng.IntN(12))
		}
		timelineBoth(t, broken, bn, bu)
	}
}

// FuzzTimelineFast: the same on any bytes.
func FuzzTimelineFast(f *testing.F) {
	f.Add([]byte{0x0a, 0x83, 0x01, 0x04, 0x05}, uint8(3), uint32(100))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0x06}, uint8(1), uint32(1))
	f.Fuzz(func(t *testing.T, src []byte, n uint8, unit uint32) {
		timelineBoth(t, src, 1+int(n)%64, int64(max(unit, 1)))
	})
}
