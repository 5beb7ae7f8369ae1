package preview

import (
	"net/http"
	"testing"
)

// TestDropClientForwarding (issue 27 L3): every forwarding or identity
// header a client sends is dropped, in any spelling, and the app's own
// headers pass.
func TestDropClientForwarding(t *testing.T) {
	for _, c := range []struct {
		name string
		drop bool
	}{
		{"Forwarded", true}, {"Via", true}, {"X-Forwarded-For", true}, {"X-Forwarded-Host", true},
		{"X-Forwarded-Proto", true}, {"X-Forwarded-Port", true}, {"X-Forwarded-Prefix", true},
		{"X-Real-IP", true}, {"Client-IP", true}, {"X-Client-IP", true}, {"True-Client-IP", true},
		{"X-Cluster-Client-IP", true}, {"CF-Connecting-IP", true}, {"Fastly-Client-IP", true},
		{"X-Envoy-External-Address", true}, {"X-Original-Forwarded-For", true}, {"X-ProxyUser-Ip", true},
		{"X-Original-URL", true}, {"X-Original-Host", true}, {"X-Rewrite-URL", true}, {"X-Host", true},
		{"X-Url-Scheme", true}, {"Front-End-Https", true}, {"Akamai-Connecting-IP", true},
		{"X_Forwarded_For", true}, {"CF_Connecting_IP", true}, {"X_Real_IP", true},
		{"Accept", false}, {"Content-Type", false}, {"X-Requested-With", false}, {"X-Custom-Header", false},
		{"User-Agent", false}, {"Origin", false}, {"Referer", false}, {"X-Csrf-Token", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			h[c.name] = []string{"10.9.8.7"} // as sent, not canonicalised
			h.Set("Accept", "text/html")
			dropClientForwarding(h)
			if _, kept := h[c.name]; kept == c.drop {
				t.Fatalf("%s kept: %v, want %v", c.name, kept, !c.drop)
			}
			if h.Get("Accept") != "text/html" {
				t.Fatal("Accept was dropped")
			}
		})
	}
}

// TestRemoveHopByHop: both ways removeHopByHop goes, by name for a large
// header and by key for a small one, remove every hop-by-hop header and
// those Connection names, and nothing else.
func TestRemoveHopByHop(t *testing.T) {
	for _, name := range hopHeaders {
		if !isHopHeader(name) {
			t.Errorf("isHopHeader(%q) = false", name)
		}
	}
	for _, name := range []string{"Content-Type", "Content-Length", "Te-Extra", "connection", "X-Upgrade"} {
		if isHopHeader(name) {
			t.Errorf("isHopHeader(%q) = true", name)
		}
	}
	for _, extra := range []int{0, len(hopHeaders)} { // the small header, then the large one
		for _, hop := range hopHeaders {
			h := http.Header{hop: {"x"}, "Connection": {"X-Named, keep-alive"}, "X-Named": {"y"}, "Content-Type": {"text/plain"}, "connection": {"raw"}}
			for i := range extra {
				h[http.CanonicalHeaderKey("X-App-"+string(rune('a'+i)))] = []string{"v"}
			}
			removeHopByHop(h)
			for _, k := range []string{hop, "Connection", "X-Named", "Keep-Alive"} {
				if _, ok := h[k]; ok {
					t.Errorf("%d extra keys: %s kept after removeHopByHop (hop %s)", extra, k, hop)
				}
			}
			//lint:ignore SA1008 a raw, non-canonical key is the case under test: removeHopByHop leaves it, as Header.Del does
			if len(h) != 2+extra || h.Get("Content-Type") != "text/plain" || h["connection"] == nil {
				t.Errorf("%d extra keys: removeHopByHop left %v (hop %s)", extra, h, hop)
			}
		}
	}
}
