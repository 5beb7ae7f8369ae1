package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pagedAPI serves GET /api/v1/sandboxes as the API does: newest first,
// ?limit= (at most 200), ?cursor= (the last ID of the previous page) and
// ?status= (one state).
type pagedAPI struct {
	list []map[string]any // newest first
}

func (p *pagedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/sandboxes" || r.Header.Get("Authorization") != "Bearer "+fakeToken {
		http.Error(w, "unexpected request", http.StatusTeapot)
		return
	}
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit < 1 || limit > 200 {
		limit = 50
	}
	var match []map[string]any
	for _, sb := range p.list {
		if st := q.Get("status"); st == "" || sb["status"] == st {
			match = append(match, sb)
		}
	}
	if c := q.Get("cursor"); c != "" {
		i := slices.IndexFunc(match, func(sb map[string]any) bool { return sb["id"] == c })
		match = match[i+1:]
	}
	var next any
	if len(match) > limit {
		match = match[:limit]
		next = match[limit-1]["id"]
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"sandboxes": orEmpty(match), "next_cursor": next})
}

func orEmpty(l []map[string]any) []map[string]any {
	if l == nil {
		return []map[string]any{}
	}
	return l
}

// TestListEveryPage: sbx list shows every live sandbox however many ended
// ones are newer (the API pages by 200), and --all shows every sandbox,
// newest first, each once.
func TestListEveryPage(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	api := &pagedAPI{}
	var wantAll []string
	// 450 sandboxes, newest first: two live ones among 448 ended, one of
	// them older than the newest 200 and one older than the newest 400.
	for i := range 450 {
		id := fmt.Sprintf("sbx-%026d", 450-i)
		status := "terminated"
		switch i {
		case 10:
			status = "suspended"
		case 300, 449:
			status = "ready"
		}
		api.list = append(api.list, map[string]any{"id": id, "status": status, "profile": "p", "platform": "linux",
			"created_at": base.Add(-time.Duration(i) * time.Minute), "deadline_at": base.Add(time.Hour)})
		wantAll = append(wantAll, id)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)

	code, out, errOut := runCLI(t, "", "list", "-o", "id")
	if want := strings.Join([]string{wantAll[10], wantAll[300], wantAll[449]}, "\n") + "\n"; code != 0 || out != want {
		t.Errorf("sbx list -o id: exit %d, stdout %q, want %q (stderr %q)", code, out, want, errOut)
	}
	code, out, errOut = runCLI(t, "", "list", "--all", "-o", "id")
	if got := strings.Fields(out); code != 0 || !slices.Equal(got, wantAll) {
		t.Errorf("sbx list --all -o id: exit %d, %d IDs, want all %d newest first (stderr %q)", code, len(got), len(wantAll), errOut)
	}
	code, out, _ = runCLI(t, "", "list", "-o", "json")
	var got []struct{ ID, Status string }
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 3 || got[2].Status != "ready" {
		t.Errorf("sbx list -o json: exit %d, %v, %+v", code, err, got)
	}
}
