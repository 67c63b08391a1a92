package beacon

import "errors"

// ErrNoWire is AppendRecordBatch's error for the zero Wire: the record's
// values are not at hand as they arrived, so it must be encoded
// (Batch.AppendBinary).
var ErrNoWire = errors.New("beacon: the record has no wire")

// Wire is a decoded record's own bytes in the batch it arrived in
// (DecodeBatchWire): its flags and everything after its strings (values,
// histograms, timeline, stalls), which depend on nothing outside the record.
// The zero Wire is none.
type Wire struct {
	minor uint8
	flags uint64
	tail  []byte
}

// AppendRecordBatch appends a batch message of the one record r, with
// site, the client facts c, Seq 0 and no dropped count: the message
// (&Batch{Site: site, Client: *c, Records: []Record{*r}}).AppendBinary
// appends, except that the record's values are copied from w, the wire r
// was decoded from, instead of being encoded again (histograms and
// timelines are most of a record's encoding cost). Its strings are written
// from r, so a caller may have changed them (a collector strips queries
// from paths). The message has the minor version r arrived in, so it
// decodes, with that version's rules, to r with its strings as given and
// every other field as decoded from w; other fields of r are not read. For
// the zero Wire it appends nothing and returns ErrNoWire. Like the decoder,
// it trusts nothing about r's strings: it checks them as the encoder does
// and, for a string the encoder would refuse, appends nothing and returns
// the encoder's error (a *DecodeError, ErrInvalid).
func AppendRecordBatch(dst []byte, site string, c *Client, r *Record, w Wire) ([]byte, error) {
	if w.tail == nil {
		return dst, ErrNoWire
	}
	if err := checkClientStrings(site, c); err != nil {
		return dst, err
	}
	if err := checkRecordStrings(0, r); err != nil {
		return dst, err
	}
	dst = appendRecordBatchHead(dst, site, c, w.minor)
	return appendRecordSection(dst, r, w), nil
}

// appendRecordBatchHead appends what precedes the record's section in
// AppendRecordBatch's message of minor version minor.
func appendRecordBatchHead(dst []byte, site string, c *Client, minor uint8) []byte {
	e := encoder{minor: minor}
	dst = appendHeader(dst, KindBatch, minor)
	dst = appendUvarint(dst, 0) // seq
	dst = appendString(dst, site)
	dst, start := beginSection(dst)
	dst = e.appendClient(dst, c)
	dst = endSection(dst, start)
	dst = appendUvarint(dst, 0)  // dropped
	return appendUvarint(dst, 1) // records
}

// appendRecordSection appends the section of record r with its wire w.
func appendRecordSection(dst []byte, r *Record, w Wire) []byte {
	dst, start := beginSection(dst)
	dst = append(dst, r.StreamID[:]...)
	dst = appendUvarint(dst, w.flags)
	dst = appendRecordStrings(dst, r, &emptyRecord)
	dst = append(dst, w.tail...)
	return endSection(dst, start)
}

// RecordBatcher is AppendRecordBatch for the records of one batch, which
// share a site and client facts: it checks and encodes those once (Reset)
// instead of once a record. Its Append appends exactly what
// AppendRecordBatch appends for the same arguments, and fails the same.
// The zero RecordBatcher is for the empty site and client facts.
type RecordBatcher struct {
	site   string
	client Client
	err    error  // why the site or client facts are refused, if they are
	head   []byte // appendRecordBatchHead for minor, when made
	minor  uint8
	made   bool
	// valid: the strings of the last record appended, which passed their
	// check; a record's strings equal to them (the records of one batch
	// share most) are not checked again.
	valid    [len(recordFields)]string
	hasValid bool
}

// Reset makes b append batches for site and the client facts c (copied).
func (b *RecordBatcher) Reset(site string, c *Client) {
	b.site, b.client = site, *c
	b.err = checkClientStrings(site, c)
	b.head, b.made = b.head[:0], false
	b.valid, b.hasValid = [len(recordFields)]string{}, false
}

// Append is AppendRecordBatch(dst, site, c, r, w) for the site and client
// facts of the last Reset.
func (b *RecordBatcher) Append(dst []byte, r *Record, w Wire) ([]byte, error) {
	if w.tail == nil {
		return dst, ErrNoWire
	}
	if b.err != nil {
		return dst, b.err
	}
	var valid *[len(recordFields)]string
	if b.hasValid {
		valid = &b.valid
	}
	if err := checkRecordStringsBut(0, r, valid); err != nil {
		return dst, err
	}
	b.valid, b.hasValid = recordStrings(r), true
	if !b.made || b.minor != w.minor {
		if b.head == nil {
			c := &b.client
			b.head = make([]byte, 0, 32+len(b.site)+len(c.UserAgent)+len(c.UABrands)+len(c.UAPlatform)+
				len(c.ConnType)+len(c.ModuleVersion)+len(c.Release))
		}
		b.head = appendRecordBatchHead(b.head[:0], b.site, &b.client, w.minor)
		b.minor, b.made = w.minor, true
	}
	dst = append(dst, b.head...)
	return appendRecordSection(dst, r, w), nil
}

// CloneWires makes ws independent of the message they were decoded from
// (whose buffer a caller may reuse): their bytes are copied into one new
// allocation.
func CloneWires(ws []Wire) {
	n := 0
	for _, w := range ws {
		n += len(w.tail)
	}
	buf := make([]byte, 0, n)
	for i := range ws {
		if ws[i].tail == nil {
			continue
		}
		at := len(buf)
		buf = append(buf, ws[i].tail...)
		ws[i].tail = buf[at:len(buf):len(buf)]
	}
}

// IsZero reports whether w is the zero Wire (none).
func (w Wire) IsZero() bool { return w.tail == nil }

// Size is about how many bytes AppendRecordBatch appends for w (its
// values; the strings come on top).
func (w Wire) Size() int { return len(w.tail) }
