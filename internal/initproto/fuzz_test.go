package initproto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzReplies: whatever a sandbox answers in the init's place (data is
// the whole stream), reading it as a call's Response and then as a
// followed log's Lines never panics and never buffers a line over the
// bound; an answer carrying an error comes back as a *RemoteError that
// matches ErrUnknownService exactly when it says so.
func FuzzReplies(f *testing.F) {
	for _, s := range []string{
		`{"services":[{"name":"web","command":"npm run dev","port":3000,"state":"running","starts":1}]}` + "\n",
		`{"error":"unknown service \"x\"","unknown":true}` + "\n",
		`{"error":"busy: no"}` + "\n",
		`{"busy":{"processes":[{"pid":7,"command":"make"}],"cpu":0.5}}` + "\n",
		"{}\n" + `{"at":"2026-01-02T03:04:05Z","text":"tick"}` + "\n" + `{"at":"x"}` + "\n",
		"\n\n{}\n",
		`{"lines":[{"at":"2026-01-02T03:04:05Z","text":"a\u0000b"}]}`,
		`{"services":[` + strings.Repeat(`{},`, 100) + `{}]}` + "\n",
		`{"services":{"name":1}}` + "\n",
		"",
		"not json\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReplies(bytes.NewReader(data))
		r.max = 1 << 10 // the bound, small enough for the fuzzer to cross
		resp, err := r.Response()
		var remote *RemoteError
		switch {
		case errors.As(err, &remote):
			if remote.Msg == "" || remote.Msg != resp.Error || errors.Is(err, ErrUnknownService) != resp.Unknown {
				t.Fatalf("remote error %+v from response %+v", remote, resp)
			}
		case err == nil && resp.Error != "":
			t.Fatalf("response %+v with an error came back without one", resp)
		}
		if n := longestToAnswer(data); errors.Is(err, ErrReplyTooLong) && n <= r.max {
			t.Fatalf("refused as too long though no line up to the first answer is over %d bytes (longest %d)", r.max, n)
		}
		for range 10_000 {
			var l Line
			if err := r.Next(&l); err != nil {
				if !errors.Is(err, io.EOF) && err.Error() == "" {
					t.Fatal("an error that says nothing")
				}
				break
			}
		}
	})
}

// longestToAnswer is the length of the longest line, newline included,
// up to and including the first that is not blank: Response reads (and
// bounds) every one of them, skipping the blank ones.
func longestToAnswer(data []byte) int {
	longest := 0
	for len(data) > 0 {
		line, rest, found := bytes.Cut(data, []byte("\n"))
		n := len(line)
		if found {
			n++
		}
		longest = max(longest, n)
		if len(bytes.TrimSpace(line)) > 0 {
			break
		}
		data = rest
	}
	return longest
}

// TestRepliesBounded: a line over the bound is refused without reading
// the rest of it into memory; one at the bound is read.
func TestRepliesBounded(t *testing.T) {
	t.Parallel()
	ok := `{"text":"` + strings.Repeat("a", 1000) + `"}`
	r := NewReplies(strings.NewReader(ok + "\n" + `{"text":"` + strings.Repeat("b", 2000) + "\"}\n"))
	r.max = len(ok) + 1
	var l Line
	if err := r.Next(&l); err != nil || len(l.Text) != 1000 {
		t.Fatalf("line at the bound: %d bytes, %v", len(l.Text), err)
	}
	if err := r.Next(&l); !errors.Is(err, ErrReplyTooLong) {
		t.Fatalf("line over the bound: %v, want ErrReplyTooLong", err)
	}
}
