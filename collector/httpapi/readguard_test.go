package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestIsReadPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/api/sites": true, "/api/streams": true, "/api": true, "/metrics": true, "/dashboard/": true,
		"/dashboard": true, "/dashboard/app.js": true, "//api/sites": true, "/x/../api/sites": true,
		"/./metrics": true, "api/sites": true,
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
		path, remote string
		hdr          map[string]string
		basic        []string // user, password
	}
	do := func(h http.Handler, rq req) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://collector"+rq.path, nil)
		r.RemoteAddr = rq.remote
		for k, v := range rq.hdr {
			r.Header.Set(k, v)
		}
		if rq.basic != nil {
			r.SetBasicAuth(rq.basic[0], rq.basic[1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const public, local = "203.0.113.7:40000", "127.0.0.1:40000"
	tests := []struct {
		name   string
		access ReadAccess
		req    req
		status int
	}{
		{"token: ingest public", ReadToken, req{path: "/v1/beacon", remote: public}, 200},
		{"token: module public", ReadToken, req{path: "/itl.js", remote: public}, 200},
		{"token: none", ReadToken, req{path: "/api/sites", remote: public}, 401},
		{"token: none from loopback", ReadToken, req{path: "/metrics", remote: local}, 401},
		{"token: bearer", ReadToken, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer " + token}}, 200},
		{"token: bearer lower case", ReadToken, req{path: "/metrics", remote: public, hdr: map[string]string{"Authorization": "bearer " + token}}, 200},
		{"token: wrong bearer", ReadToken, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer " + token + "x"}}, 401},
		{"token: prefix of it", ReadToken, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer " + token[:8]}}, 401},
		{"token: basic", ReadToken, req{path: "/dashboard/", remote: public, basic: []string{"anyone", token}}, 200},
		{"token: basic wrong", ReadToken, req{path: "/dashboard/", remote: public, basic: []string{token, "nope"}}, 401},
		{"token: unclean path", ReadToken, req{path: "/x/../api/sites", remote: public}, 401},
		{"loopback: local", ReadLoopback, req{path: "/api/sites", remote: local}, 200},
		{"loopback: ::1", ReadLoopback, req{path: "/metrics", remote: "[::1]:5000"}, 200},
		{"loopback: public", ReadLoopback, req{path: "/api/sites", remote: public}, 403},
		{"loopback: proxied", ReadLoopback, req{path: "/api/sites", remote: local, hdr: map[string]string{"X-Forwarded-For": "203.0.113.7"}}, 403},
		{"loopback: proxied (Forwarded)", ReadLoopback, req{path: "/dashboard/", remote: local, hdr: map[string]string{"Forwarded": "for=203.0.113.7"}}, 403},
		{"loopback: token does not matter", ReadLoopback, req{path: "/api/sites", remote: public, hdr: map[string]string{"Authorization": "Bearer "}}, 403},
		{"loopback: ingest public", ReadLoopback, req{path: "/v1/ws", remote: public}, 200},
		{"nowhere: local", ReadNowhere, req{path: "/api/sites", remote: local}, 403},
		{"nowhere: demo public", ReadNowhere, req{path: "/demo/", remote: public}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := ""
			if tt.access == ReadToken {
				tok = token
			}
			w := do(ReadGuard(next, tt.access, tok, "http://127.0.0.1:8081"), tt.req)
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
