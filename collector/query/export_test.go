package query

import "context"

// CompareLimits is Compare with at most limits[0] streams on side a and
// limits[1] on side b, a side read from the sample when it holds at least
// floor of them, so that a test reaches the sample's bounds with a few
// thousand streams.
func CompareLimits(ctx context.Context, conn Conn, f Filter, dim, a, b string, limits [2]int, floor int) (Comparison, error) {
	return compare(ctx, conn, f, dim, a, b, limits, floor)
}

// StreamRowSQL is the stream view's read of one stream's row.
const StreamRowSQL = streamRowSQL
