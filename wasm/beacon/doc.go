// Package beacon is the wire format between the browser module (and origin
// reporters) and the collector: a versioned, compact, hand-encoded binary
// message. No reflection, fmt, encoding/json or net/http: it is compiled into
// the browser module.
//
// Contract (implementation in progress):
//
//	const Version = 1
//	type Kind uint8 (KindBatch = 1 client records; KindAck = 2 collector->client; KindOrigin = 3 origin timelines)
//	type Batch struct { Seq uint64; Site string; Client Client; Dropped uint32; Records []Record }
//	type Ack struct { Seq uint64 }
//	type Limits struct { MaxBytes, MaxRecords, MaxBuckets, MaxTimeline, MaxString int }; DefaultLimits
//	func (b *Batch) AppendBinary(dst []byte) ([]byte, error)
//	func DecodeBatch(src []byte, lim Limits) (*Batch, error)   // errors name the field and why
//	func (a Ack) AppendBinary(dst []byte) []byte; func DecodeAck(src []byte) (Ack, error)
//	func PeekKind(src []byte) (Kind, uint8 /*version*/, error)
package beacon
