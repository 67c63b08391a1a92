package deps
import (
 _ "github.com/ClickHouse/clickhouse-go/v2"
 _ "github.com/chromedp/chromedp"
 _ "github.com/gorilla/websocket"
 _ "github.com/ebitengine/purego"
 _ "github.com/rs/zerolog"
 _ "pgregory.net/rapid"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/oschwald/maxminddb-golang/v2"
 _ "github.com/maxmind/mmdbwriter"
 _ "github.com/medama-io/go-useragent"
 _ "github.com/andybalholm/brotli"
)
