package preview_test

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cRequest sends one request as raw HTTP/2 frames on a cleartext
// connection and returns the :status of its answer.
func h2cRequest(t *testing.T, addr string, fields ...hpack.HeaderField) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	endStream := true // no body; a CONNECT's stream stays open for the tunnel
	for _, f := range fields {
		_ = enc.WriteField(f)
		if f.Name == ":method" && f.Value == http.MethodConnect {
			endStream = false
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: endStream}); err != nil {
		t.Fatal(err)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			hs, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				if h.Name == ":status" {
					return h.Value
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "RST " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// TestH2CConnectIsNoTunnel (issue 27 L1): an HTTP/2 CONNECT without
// :protocol websocket is refused with 400 and never reaches the app; a
// plain GET on the same kind of connection still does.
func TestH2CConnectIsNoTunnel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("siteaa", "sbx-a", "acct-a", false, false)
	authority := "siteaa." + domain + ":" + strconv.Itoa(e.port())
	auth := hpack.HeaderField{Name: "authorization", Value: "Bearer " + tokenA}

	got := h2cRequest(t, e.addr, hpack.HeaderField{Name: ":method", Value: "CONNECT"},
		hpack.HeaderField{Name: ":authority", Value: authority}, auth,
		hpack.HeaderField{Name: "x-forwarded-for", Value: "10.9.8.7"})
	if got != "400" {
		t.Fatalf("CONNECT: got %s, want 400", got)
	}
	for _, r := range e.upstream.all() {
		if r.Method == http.MethodConnect {
			t.Fatalf("the app received a CONNECT (%s %s)", r.Method, r.Host)
		}
	}

	got = h2cRequest(t, e.addr, hpack.HeaderField{Name: ":method", Value: "GET"},
		hpack.HeaderField{Name: ":scheme", Value: "http"}, hpack.HeaderField{Name: ":path", Value: "/h2c"},
		hpack.HeaderField{Name: ":authority", Value: authority}, auth)
	if got != "200" {
		t.Fatalf("GET: got %s, want 200", got)
	}
	if r := e.upstream.last(); r == nil || r.URL.Path != "/h2c" {
		t.Fatalf("the app's last request %v, want GET /h2c", r)
	}
}
