package query

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Conn is the part of a clickhouse-go connection the read side uses;
// clickhouse.Conn satisfies it.
type Conn interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// Filter selects rollup rows. Site and Since are required; Until defaults to
// now. Where keys must be Dimensions; values match exactly.
type Filter struct {
	Site         string
	Since, Until time.Time
	Where        map[string]string
}

// ErrBadFilter is wrapped by every Filter.Validate error.
var ErrBadFilter = errors.New("bad filter")

// Validate checks the filter before any SQL is built.
func (f *Filter) Validate() error {
	if f.Site == "" {
		return fmt.Errorf("%w: site is required", ErrBadFilter)
	}
	if f.Since.IsZero() {
		return fmt.Errorf("%w: since is required", ErrBadFilter)
	}
	if !f.Until.IsZero() && !f.Until.After(f.Since) {
		return fmt.Errorf("%w: until must be after since", ErrBadFilter)
	}
	for k := range f.Where {
		if _, ok := dimColumn[k]; !ok {
			return fmt.Errorf("%w: unknown dimension %q: allowed are %s", ErrBadFilter, k, strings.Join(Dimensions(), ", "))
		}
	}
	return nil
}

// Dimensions are the keys of Filter.Where and Breakdown, sorted.
func Dimensions() []string {
	ks := make([]string, 0, len(dimColumn))
	for k := range dimColumn {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// bounds is the filter's time range in whole minutes, [lo, hi): the
// rollups are per minute, so a window starting mid-minute includes that
// minute, one ending mid-minute includes the minute it ends in. Until
// defaults to now.
func (f *Filter) bounds() (lo, hi time.Time) {
	until := f.Until
	if until.IsZero() {
		until = time.Now()
	}
	return f.Since.UTC().Truncate(time.Minute), until.UTC().Truncate(time.Minute).Add(time.Minute)
}

// dims is the filter's dimension conditions (" AND col = ?" each, sorted by
// key) and their arguments: only column names from dimColumn (never user
// text) enter the SQL; every value is an argument.
func (f *Filter) dims() (string, []any) {
	keys := make([]string, 0, len(f.Where))
	for k := range f.Where {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	args := make([]any, 0, len(keys))
	for _, k := range keys {
		b.WriteString(" AND " + dimColumn[k] + " = ?")
		args = append(args, f.Where[k])
	}
	return b.String(), args
}

// where builds the WHERE clause of the minute table over the whole range,
// with positional parameters.
func (f *Filter) where() (string, []any) {
	lo, hi := f.bounds()
	dims, dargs := f.dims()
	return colSite + " = ? AND " + colMinute + " >= ? AND " + colMinute + " < ?" + dims,
		append([]any{f.Site, lo, hi}, dargs...)
}
