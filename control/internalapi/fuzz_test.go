package internalapi

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// decodes is every request body the internal API decodes (the routes of
// server.go), each through jsonEndpoint with a handler that only checks
// what it was given.
func decodes(t *testing.T, s *Server) map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		edgeapi.PathSSHAuthorize:     fuzzEndpoint[edgeapi.SSHAuthorizeRequest](t, s),
		edgeapi.PathWake:             fuzzEndpoint[edgeapi.WakeRequest](t, s),
		edgeapi.PathEgressAuthorize:  fuzzEndpoint[edgeapi.EgressAuthorizeRequest](t, s),
		edgeapi.PathConnections:      fuzzEndpoint[edgeapi.ConnectionsReport](t, s),
		edgeapi.PathEgressLog:        fuzzEndpoint[edgeapi.EgressLogRequest](t, s),
		edgeapi.PathEgressCredential: fuzzEndpoint[edgeapi.EgressCredentialRequest](t, s),
		edgeapi.PathPreviewRoute:     fuzzEndpoint[edgeapi.PreviewRouteRequest](t, s),
		edgeapi.PathPreviewToken:     fuzzEndpoint[edgeapi.PreviewTokenRequest](t, s),
		edgeapi.PathPreviewMember:    fuzzEndpoint[edgeapi.PreviewMemberRequest](t, s),
		edgeapi.PathPreviewShare:     fuzzEndpoint[edgeapi.PreviewShareRequest](t, s),
	}
}

// fuzzEndpoint decodes Req as the route does; the request it hands on
// must encode, and decode again to what encodes the same (bytes, not
// reflect.DeepEqual: a decoded time's zone is a fresh pointer each time).
func fuzzEndpoint[Req any](t *testing.T, s *Server) http.HandlerFunc {
	return jsonEndpoint(s, func(_ context.Context, req Req) (struct{}, error) {
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("%T decoded but does not encode: %v", req, err)
		}
		var again Req
		err = json.Unmarshal(b, &again)
		b2, _ := json.Marshal(again)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("%T encodes to %s, which decodes to what encodes to %s, %v", req, b, b2, err)
		}
		return struct{}{}, nil
	})
}

// FuzzInternalRequests: any body, on every route of the internal API,
// is decoded (200) or refused as a 400 problem document naming why;
// nothing panics or answers otherwise. The seed corpus holds each
// route's real bodies, nesting, duplicate keys and wrong types.
func FuzzInternalRequests(f *testing.F) {
	for _, s := range []string{
		`{"sandbox_id":"sb-1","fingerprint":"SHA256:x","user":"sb-1"}`,
		`{"host":"abc.preview.test"}`, `{"token":"sbx_x"}`, `{"subject":"s","issuer":"i"}`,
		`{"edge":"e1","lease_s":30,"opened":[{"id":"c1","sandbox_id":"sb-1","kind":"ssh"}],"closed":["c0"]}`,
		`{"entries":[{"sandbox_id":"sb-1","host":"example.com","port":443,"allowed":true}]}`,
		`{"sandbox_id":"sb-1","SANDBOX_ID":"sb-2"}`,
		`{"host":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
		`{"lease_s":"30"}`, `{"entries":[{"at":"2026-01-02T03:04:05+01:00"}],"opened":[{"started_at":"2026-01-02T03:04:05.123456789-07:00"}]}`, `{"port":1e999}`, `null`, `[]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := &Server{log: slog.New(slog.DiscardHandler)}
		for path, h := range decodes(t, s) {
			w := httptest.NewRecorder()
			h(w, httptest.NewRequest("POST", path, bytes.NewReader(body)))
			switch {
			case w.Code == 200:
			case w.Code == 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "application/problem+json") &&
				strings.Contains(w.Body.String(), "decode request body"):
			default:
				t.Fatalf("%s answered %d %q: %s", path, w.Code, w.Header().Get("Content-Type"), w.Body)
			}
		}
	})
}
