package query

import "context"

// CompareLimit is Compare with at most limit streams per side, so that a
// test reaches the sample's bound with a few thousand streams.
func CompareLimit(ctx context.Context, conn Conn, f Filter, dim, a, b string, limit int) (Comparison, error) {
	return compare(ctx, conn, f, dim, a, b, limit)
}

// StreamRowSQL is the stream view's read of one stream's row.
const StreamRowSQL = streamRowSQL
