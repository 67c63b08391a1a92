package demo

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Buffer sizes of the buffering proxy (`buffer` in the request's query).
const (
	DefaultProxyBuffer = 2048
	MaxProxyBuffer     = 1 << 20
)

// ProxyConfig configures Proxy.
type ProxyConfig struct {
	// Upstream is the base URL of the server whose /demo/ endpoints the
	// proxy forwards to (the collector itself), e.g. "http://127.0.0.1:8080".
	Upstream string
	// Origins may call the proxy from a page (CORS); "*" allows any.
	Origins []string
	// Client makes the upstream requests (default: one that neither times
	// out nor decompresses).
	Client *http.Client
}

// Proxy is the demo's re-chunking step: a reverse proxy in front of the
// streaming endpoints (the paths of the package doc, under /demo) that
// buffers responses the way a proxy with response buffering does. It passes
// the origin's bytes on only in full buffers of `buffer` bytes (from the
// query, default DefaultProxyBuffer), flushing each, and the rest when the
// origin's response ends: the origin emits one event at a time, the page
// reads several at once after a wait. It serves it on a listener of its own,
// so its streams are a separate API origin on the dashboard, as a proxy in
// front of an origin is. Pages of Origins may call it (CORS, with the
// origin's stream id header exposed).
func Proxy(cfg ProxyConfig) http.Handler {
	client := cfg.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableCompression = true
		client = &http.Client{Transport: tr}
	}
	upstream := strings.TrimSuffix(cfg.Upstream, "/")
	paths := map[string]bool{}
	for a := range API(len(apiPaths)) {
		paths["/demo"+a.Path()] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && (slices.Contains(cfg.Origins, o) || slices.Contains(cfg.Origins, "*")) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", o)
			h.Set("Timing-Allow-Origin", o)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST")
				h.Set("Access-Control-Allow-Headers", "Content-Type, X-Demo-Cadence")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		if !paths[r.URL.Path] {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodPost && r.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		size, err := proxyBuffer(r.URL.Query().Get("buffer"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var body io.Reader
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			if err != nil || len(b) > maxBody {
				http.Error(w, "request body: unreadable or over 1 MiB", http.StatusBadRequest)
				return
			}
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for _, k := range []string{"Content-Type", "Accept", "X-Demo-Cadence", "X-Request-Id"} {
			if v := r.Header.Get(k); v != "" {
				req.Header.Set(k, v)
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		h := w.Header()
		for k, vs := range resp.Header {
			switch k {
			case "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Date":
				continue
			}
			h[k] = append(h[k], vs...)
		}
		w.WriteHeader(resp.StatusCode)
		relay(w, resp.Body, size)
	})
}

// proxyBuffer parses the `buffer` query value.
func proxyBuffer(s string) (int, error) {
	if s == "" {
		return DefaultProxyBuffer, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxProxyBuffer {
		return 0, errors.New("buffer: want bytes in [1, " + strconv.Itoa(MaxProxyBuffer) + "]")
	}
	return n, nil
}

// relay copies src to w in whole buffers of size bytes, flushing each, and
// what is left when src ends.
func relay(w http.ResponseWriter, src io.Reader, size int) {
	rc := http.NewResponseController(w)
	held := make([]byte, 0, size+32<<10)
	chunk := make([]byte, 32<<10)
	for {
		n, err := src.Read(chunk)
		held = append(held, chunk[:n]...)
		if full := len(held) / size * size; full > 0 {
			if _, werr := w.Write(held[:full]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			held = append(held[:0], held[full:]...)
		}
		if err != nil { // io.EOF, or the origin's response broke off: pass on what is held
			if len(held) > 0 {
				w.Write(held)
				rc.Flush()
			}
			return
		}
	}
}
