package httpapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/andybalholm/brotli"
)

// moduleAssets are served to any origin: the pages that embed itlmon live
// elsewhere. Each is looked up in Dist first, then in Static.
var moduleAssets = []struct {
	name, contentType, cacheControl string
}{
	// The loader is small and names no version: short cache, revalidated by ETag.
	{"itl.js", "text/javascript; charset=utf-8", "public, max-age=300"},
	// What the loader fetches lazily: the module host and its Worker go with
	// the module (itl.js checks the host's protocol version).
	{"itl-module.js", "text/javascript; charset=utf-8", "public, max-age=3600"},
	{"itl-worker.js", "text/javascript; charset=utf-8", "public, max-age=3600"},
	{"wasm_exec.js", "text/javascript; charset=utf-8", "public, max-age=3600"},
	{"itl.wasm", "application/wasm", "public, max-age=3600"},
}

// asset is one file with its encodings, loaded once at start.
type asset struct {
	name, contentType, cacheControl string
	modTime                         time.Time
	variants                        []variant // preferred first: br, gzip, identity
}

type variant struct {
	encoding string // "br", "gzip" or "" (identity)
	data     []byte
	etag     string
}

func mountAssets(mux *http.ServeMux, fsyss ...fs.FS) error {
	for _, m := range moduleAssets {
		a, err := loadAsset(m.name, fsyss)
		if err != nil {
			return fmt.Errorf("load %s: %w", m.name, err)
		}
		if a == nil {
			continue // not built (make wasm): 404 like any missing file
		}
		a.contentType, a.cacheControl = m.contentType, m.cacheControl
		mux.Handle("GET /"+m.name, a)
	}
	return nil
}

func loadAsset(name string, fsyss []fs.FS) (*asset, error) {
	for _, fsys := range fsyss {
		if fsys == nil {
			continue
		}
		raw, err := fs.ReadFile(fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		a := &asset{name: name, modTime: time.Now()}
		if st, err := fs.Stat(fsys, name); err == nil && !st.ModTime().IsZero() {
			a.modTime = st.ModTime()
		}
		// The compressed copies `make wasm` made beside the file, else ones
		// made here, once (brotli takes ~15 % off gzip's bytes, and the
		// loader is on the page's critical path). A small file's copies are
		// checked against it (a build cut between writing them and the file
		// leaves copies of another version); the module's are written before
		// it and too large to check at every start.
		small := len(raw) <= maxCompressAtStart
		br, ok := precompressed(fsys, name+".br", raw, small, brotliReader)
		if !ok && small {
			var err error
			if br, err = brotliBytes(raw); err == nil {
				ok = true
			}
		}
		if ok {
			a.variants = append(a.variants, newVariant("br", br))
		}
		gz, ok := precompressed(fsys, name+".gz", raw, small, gzipReader)
		if !ok {
			if gz, err = gzipBytes(raw); err != nil {
				return nil, err
			}
		}
		a.variants = append(a.variants, newVariant("gzip", gz), newVariant("", raw))
		return a, nil
	}
	return nil, nil
}

func newVariant(enc string, data []byte) variant {
	sum := sha256.Sum256(data)
	tag := base64.RawURLEncoding.EncodeToString(sum[:12])
	if enc != "" {
		tag += "-" + enc
	}
	return variant{encoding: enc, data: data, etag: `"` + tag + `"`}
}

// maxCompressAtStart bounds what loadAsset compresses with brotli itself
// (quality 11 costs ~2 ms of CPU per KB: 70 ms for the loader, 2026-12-05);
// larger assets bring their own .br.
const maxCompressAtStart = 256 << 10

// precompressed returns the compressed copy of raw at name in fsys, if
// there is one and, when check is set, it decodes (with decoder) to raw.
func precompressed(fsys fs.FS, name string, raw []byte, check bool, decoder func(io.Reader) (io.Reader, error)) ([]byte, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, false
	}
	if !check {
		return b, true
	}
	r, err := decoder(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	got, err := io.ReadAll(io.LimitReader(r, int64(len(raw))+1))
	if err != nil || !bytes.Equal(got, raw) {
		return nil, false
	}
	return b, true
}

func brotliReader(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil }

func gzipReader(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

func brotliBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	bw := brotli.NewWriterLevel(&buf, brotli.BestCompression)
	if _, err := bw.Write(b); err != nil {
		return nil, err
	}
	if err := bw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (a *asset) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v := a.pick(r.Header.Get("Accept-Encoding"))
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", a.cacheControl)
	h.Set("ETag", v.etag)
	h.Set("Vary", "Accept-Encoding")
	h.Set("Access-Control-Allow-Origin", "*")
	// Pages may see what itlmon's own files cost them (Resource Timing sizes
	// and phases are hidden cross-origin without it).
	h.Set("Timing-Allow-Origin", "*")
	h.Set("Cross-Origin-Resource-Policy", "cross-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	if v.encoding != "" {
		h.Set("Content-Encoding", v.encoding)
	}
	http.ServeContent(w, r, a.name, a.modTime, bytes.NewReader(v.data))
}

// pick returns the first variant the client accepts (q=0 excludes).
func (a *asset) pick(acceptEncoding string) variant {
	for _, v := range a.variants {
		if v.encoding == "" || accepts(acceptEncoding, v.encoding) {
			return v
		}
	}
	return a.variants[len(a.variants)-1]
}

func accepts(header, enc string) bool {
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), enc) && strings.TrimSpace(name) != "*" {
			continue
		}
		params = strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		if params == "q=0" || params == "q=0.0" || params == "q=0.00" || params == "q=0.000" {
			return false
		}
		return true
	}
	return false
}
