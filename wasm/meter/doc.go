// Package meter parses a streamed HTTP response body incrementally, one network
// read at a time with its arrival time, recognises token events for the common
// LLM streaming APIs, and computes the stream's timeline and summary exactly as
// DESIGN.md defines them. It is pure Go (no syscall/js) and must not import fmt,
// encoding/json, net/http or any reflection-based encoder: it is compiled into
// the browser module.
//
// Contract (implementation in progress):
//
//	type Options struct {
//		ContentType    string        // response Content-Type, used to pick the framing/format
//		TimerFloor     time.Duration // clock resolution (100µs Chromium, 1ms Firefox); 0 = 100µs
//		TokensPerEvent int           // known tokens per content event (0 = unknown)
//		MaxTimeline    int           // first N events kept in the raw timeline (default 256)
//		MaxStalls      int           // stalls kept in StallList (default 64)
//	}
//	func New(opts Options) *Meter
//	func (m *Meter) Feed(chunk []byte, at time.Duration) // one network read, arrival time since t0
//	func (m *Meter) MarkBusy(start, end time.Duration)   // a main-thread long task / LoAF interval
//	func (m *Meter) End(at time.Duration, st Status, httpStatus int)
//	func (m *Meter) Format() Format
//	func (m *Meter) Summary() Summary                    // valid at any time; final after End
//	func (m *Meter) Reset(opts Options)                  // reuse without allocating
//
// Feed must not retain chunk, must not allocate per event in the steady state,
// and handles any split of the body across reads identically.
package meter
