package beacon

import "github.com/itlmon/itlmon/wasm/hist"

// Client is what the page can tell about itself; it is sent once per batch.
type Client struct {
	UserAgent      string // navigator.userAgent (the collector also sees the header)
	UABrands       string // UA client hints, "Brand;major,Brand;major"
	UAPlatform     string // UA client hints platform ("Windows", "Android", ...)
	UAMobile       bool
	ConnType       string // navigator.connection.effectiveType ("4g", ...), "" if unknown
	ConnRTTMs      uint16 // navigator.connection.rtt
	TimerFloorUs   uint32 // measured performance.now() resolution, microseconds
	CrossOriginIso bool   // crossOriginIsolated
	ModuleVersion  string // itlmon browser module version
	Release        string // the page's release tag (itlmon.init({release}))
}

// Stall is one client-side gap over 200 ms between content events.
type Stall struct {
	StartUs, EndUs uint32 // since t0, microseconds
	Cause          uint8  // meter.Cause
	NextReadEvents uint32
}

// Stamp is one raw timeline entry.
type Stamp struct {
	AtUs    uint32 // since t0, microseconds
	Read    uint32
	Content bool
}

// Record is one measured stream. Times are microseconds since t0 (just before
// the page issued fetch) unless named otherwise; NoTime means "did not happen".
type Record struct {
	StreamID    [16]byte // 128-bit random, made by the browser module
	OriginID    string   // stream id from the response header (X-Itlmon-Stream / X-Request-Id), "" if none
	StartUnixMs int64    // wall clock of t0
	PageOrigin  string   // e.g. "https://chat.example.com"
	PagePath    string   // location.pathname, never the query or fragment
	URLOrigin   string   // the fetched URL's origin
	URLPath     string   // the fetched URL's path, never the query
	Model       string   // request body's "model" field, "" if unknown
	HTTPProto   string   // resource timing nextHopProtocol ("h2", "http/1.1", "h3")
	ContentType string   // response media type without parameters

	Format     uint8  // meter.Format
	Status     uint8  // meter.Status
	HTTPStatus uint16 // 0 when the request ended before response headers
	End        uint8  // meter.End: how the body ended (meter.EndNone from senders older than minor 1)
	// HeadersUs is when the response headers arrived; NoTime when the
	// request was aborted or failed before them (then DurationUs is the
	// time waited, and the stream has no body facts). Where the sender did
	// not know it (a sender older than minor 1, a page script that does not
	// pass it) it is an upper bound: TTFBUs, or DurationUs without a body
	// byte. NoTime always means "ended before the headers".
	HeadersUs uint32

	TTFBUs, TTFCUs, TTFTUs, DurationUs uint32 // NoTime when absent

	Events, ContentEvents, Tokens uint32
	TokensReported                bool
	Reads                         uint32
	Bytes                         uint64

	GapP50Us, GapP95Us, GapP99Us, GapMaxUs uint32
	TPOTUs                                 uint32
	TokensPerSec                           float32
	Stalls                                 uint32
	StalledUs                              uint64
	Jank                                   float32
	Smooth                                 bool

	EventsPerRead    float32
	MaxEventsPerRead uint32
	BytesPerRead     float32
	SubFloorShare    float32

	StallsByCause  [5]uint32 // indexed by meter.Cause
	StalledByCause [5]uint64 // microseconds
	TTFTCause      uint8

	ITL       hist.Histogram // per-chunk ITL, microseconds
	ITLTokens hist.Histogram // token-normalised ITL (may be empty)

	StallList       []Stall
	Timeline        []Stamp
	TimelineDropped uint32
}

// NoTime marks an absent time field.
const NoTime = ^uint32(0)
