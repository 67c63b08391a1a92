package httpapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/itlmon/itlmon/collector/dimension"
)

// TestDimensions: /api/dimensions answers the registry as it is, even
// without a database (the dashboard builds its tabs from it first).
func TestDimensions(t *testing.T) {
	mux := http.NewServeMux()
	RegisterDashboard(mux, DashboardConfig{})
	rec := get(t, mux, "/api/dimensions")
	if rec.Code != 200 {
		t.Fatalf("status = %d %s, want 200", rec.Code, rec.Body)
	}
	if got, want := rec.Header().Get("Content-Type"), "application/json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var body struct {
		Dimensions []dimension.Dimension `json:"dimensions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	if got, want := body.Dimensions, dimension.All(); !reflect.DeepEqual(got, want) {
		t.Fatalf("dimensions = %+v, want %+v", got, want)
	}
	if get(t, ReadGuard(mux, ReadPolicy{}), "/api/dimensions").Code == 200 {
		t.Errorf("/api/dimensions answered a request the read guard refuses: it must be on the read side")
	}
}
