package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/itlmon/itlmon/collector/secret"
)

func TestIsReadPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/api/sites": true, "/api/streams": true, "/api": true, "/metrics": true, "/dashboard/": true,
		"/dashboard": true, "/dashboard/app.js": true, "//api/sites": true, "/x/../api/sites": true,
		"/./metrics": true, "api/sites": true, "/api/health": true,
		"/v1/ws": false, "/v1/beacon": false, "/itl.js": false, "/itl.wasm": false, "/wasm_exec.js": false,
		"/demo/": false, "/": false, "/healthz": false, "/readyz": false, "/apis": false, "/metricsx": false,
		"/dashboards": false,
	} {
		if got := IsReadPath(p); got != want {
			t.Errorf("IsReadPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestReadGuard(t *testing.T) {
	const token = "0123456789abcdef-read"
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("served")) })
	type req struct {
		path, remote, host string
		hdr                map[string]string
		basic              []string // user, password
		http10             bool
	}
	do := func(h http.Handler, rq req) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://collector"+rq.path, nil)
		r.RemoteAddr = rq.remote
		r.Host = rq.host
		if r.Host == "" {
			r.Host = "127.0.0.1:8080"
		}
		for k, v := range rq.hdr {
			r.Header.Set(k, v)
		}
		if rq.basic != nil {
			r.SetBasicAuth(rq.basic[0], rq.basic[1])
		}
		if rq.http10 {
			r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.0", 1, 0
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const public, local = "203.0.113.7:40000", "127.0.0.1:40000"
	tok := ReadPolicy{Token: secret.New(token)}
	loc := ReadPolicy{Local: true}
	both := ReadPolicy{Token: secret.New(token), Local: true}
	none := ReadPolicy{}
	bearer := map[string]string{"Authorization": "Bearer " + token}
	tests := []struct {
		name   string
		policy ReadPolicy
		req    req
		status int
	}{
		{"token: ingest public", tok, req{path: "/v1/beacon", remote: public}, 200},
		{"token: module public", tok, req{path: "/itl.js", remote: public}, 200},
		{"token: none", tok, req{path: "/api/sites", remote: public}, 401},
		{"token: none from loopback", tok, req{path: "/metrics", remote: local}, 401},
		{"token: bearer", tok, req{path: "/api/sites", remote: public, hdr: bearer}, 200},
		{"token: bearer lower case", tok, req{path: "/metrics", remote: public, hdr: map[string]string{"Authorization": "bearer " + token}}, 200},
		{"token: wrong bearer", tok, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer " + token + "x"}}, 401},
		{"token: prefix of it", tok, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer " + token[:8]}}, 401},
		{"token: empty bearer", tok, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer "}}, 401},
		{"token: basic", tok, req{path: "/dashboard/", remote: public, basic: []string{"anyone", token}}, 200},
		{"token: basic wrong", tok, req{path: "/dashboard/", remote: public, basic: []string{token, "nope"}}, 401},
		{"token: unclean path", tok, req{path: "/x/../api/sites", remote: public}, 401},
		{"local: local", loc, req{path: "/api/sites", remote: local}, 200},
		{"local: localhost", loc, req{path: "/api/sites", remote: local, host: "localhost:8080"}, 200},
		{"local: ::1", loc, req{path: "/metrics", remote: "[::1]:5000", host: "[::1]:8080"}, 200},
		{"local: public", loc, req{path: "/api/sites", remote: public}, 403},
		{"local: proxied", loc, req{path: "/api/sites", remote: local, hdr: map[string]string{"X-Forwarded-For": "203.0.113.7"}}, 403},
		{"local: proxied (Forwarded)", loc, req{path: "/dashboard/", remote: local, hdr: map[string]string{"Forwarded": "for=203.0.113.7"}}, 403},
		{"local: proxied (X-Real-IP)", loc, req{path: "/dashboard/", remote: local, hdr: map[string]string{"X-Real-IP": "203.0.113.7"}}, 403},
		{"local: proxied with the public Host", loc, req{path: "/api/sites", remote: local, host: "rum.example.com"}, 403},
		{"local: HTTP/1.0 (nginx's default to its upstream)", loc, req{path: "/api/sites", remote: local, http10: true}, 403},
		{"token: HTTP/1.0 with the token", tok, req{path: "/api/sites", remote: local, http10: true, hdr: bearer}, 200},
		{"local: DNS rebinding", loc, req{path: "/api/sites", remote: local, host: "attacker.example:8080"}, 403},
		{"local: token does not matter", loc, req{path: "/api/sites", remote: public, hdr: bearer}, 403},
		{"local: ingest public", loc, req{path: "/v1/ws", remote: public}, 200},
		{"both: local", both, req{path: "/api/sites", remote: local}, 200},
		{"both: proxied with the token", both, req{path: "/api/sites", remote: local, host: "rum.example.com", hdr: bearer}, 200},
		{"both: proxied without", both, req{path: "/api/sites", remote: local, host: "rum.example.com"}, 401},
		{"none: local", none, req{path: "/api/sites", remote: local}, 403},
		{"none: bearer", none, req{path: "/api/sites", remote: local, hdr: map[string]string{"Authorization": "Bearer "}}, 403},
		{"none: demo public", none, req{path: "/demo/", remote: public}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(ReadGuard(next, tt.policy), tt.req)
			if w.Code != tt.status {
				t.Fatalf("status = %d %q, want %d", w.Code, w.Body, tt.status)
			}
			if tt.status == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate: a browser would not ask for the token")
			}
			if tt.status == 200 && w.Body.String() != "served" {
				t.Fatalf("body = %q", w.Body)
			}
		})
	}
}
