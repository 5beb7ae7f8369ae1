package api_test

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/internal/testkit/apicheck"
)

// TestRoutesMatchOpenAPI keeps the router and the contract in step: every
// route the server has is documented, and every documented operation is
// routed.
func TestRoutesMatchOpenAPI(t *testing.T) {
	srv := api.New(api.Config{}, api.Deps{})
	router, ok := srv.Handler().(chi.Routes)
	if !ok {
		t.Fatal("Handler is not a chi router")
	}
	var routed []string
	trailing := regexp.MustCompile(`/$`)
	err := chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.ReplaceAll(route, "/*", "/{path}")
		if route != "/" {
			route = trailing.ReplaceAllString(route, "")
		}
		routed = append(routed, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := apicheck.New(t, api.OpenAPI()).Paths()
	slices.Sort(routed)
	slices.Sort(documented)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is served but not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("operation %q is in openapi.json but not routed", d)
		}
	}
}
