package preview

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// answerOf reads answer as the lean relay does, for a request of method,
// with the body read to its end; fast reports whether readAnswer took
// its own path rather than http.ReadResponse.
func answerOf(method string, answer []byte, read func(*upConn, *http.Request) (*http.Response, error)) (resp *http.Response, body []byte, bodyErr, err error, fast bool) {
	c := &upConn{}
	c.br = bufio.NewReaderSize(bytes.NewReader(answer), 4<<10)
	r, _ := http.NewRequest(method, "http://app/", nil)
	resp, err = read(c, r)
	if err != nil {
		return nil, nil, nil, err, false
	}
	body, bodyErr = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, body, bodyErr, nil, resp == &c.resp
}

func stdAnswer(c *upConn, r *http.Request) (*http.Response, error) { return http.ReadResponse(c.br, r) }

// checkAnswerParity fails when readAnswer took its own path and read
// answer differently from http.ReadResponse.
func checkAnswerParity(t *testing.T, method string, answer []byte) (fast bool) {
	t.Helper()
	got, gotBody, gotBodyErr, err, fast := answerOf(method, answer, readAnswer)
	want, wantBody, wantBodyErr, wantErr, _ := answerOf(method, answer, stdAnswer)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: err %v, http.ReadResponse's %v", answer, err, wantErr)
	}
	if err != nil {
		if err.Error() != wantErr.Error() {
			t.Fatalf("%q: err %v, http.ReadResponse's %v", answer, err, wantErr)
		}
		return false
	}
	if got.Status != want.Status || got.StatusCode != want.StatusCode || got.Proto != want.Proto ||
		got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor ||
		got.ContentLength != want.ContentLength || got.Close != want.Close ||
		!reflect.DeepEqual(got.Header, want.Header) || !reflect.DeepEqual(got.Trailer, want.Trailer) ||
		!reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) || got.Uncompressed != want.Uncompressed {
		t.Fatalf("%q (fast %v):\n got %+v\nwant %+v", answer, fast, got, want)
	}
	if !bytes.Equal(gotBody, wantBody) || (gotBodyErr == nil) != (wantBodyErr == nil) {
		t.Fatalf("%q: body %q, %v; http.ReadResponse's %q, %v", answer, gotBody, gotBodyErr, wantBody, wantBodyErr)
	}
	return fast
}

// TestReadAnswerFast checks that the plain answers of dev servers take
// readAnswer's own path (FuzzAnswerHead would pass with a readAnswer
// that always deferred to http.ReadResponse), and that the others do
// not.
func TestReadAnswerFast(t *testing.T) {
	tests := []struct {
		name, method, answer string
		fast                 bool
	}{
		{"express", "GET", "HTTP/1.1 200 OK\r\nX-Powered-By: Express\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 5\r\nETag: W/\"5-x\"\r\nDate: Sun, 29 Nov 2026 08:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\nhello", true},
		{"go", "GET", "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n", true},
		{"no reason", "POST", "HTTP/1.1 500\r\nContent-Length: 2\r\n\r\nno", true},
		{"odd case, spaces", "GET", "HTTP/1.1 200 OK\r\ncontent-length:  3 \r\nx-A:\t b \t\r\n\r\nabc", true},
		{"head", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", false},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", false},
		{"close-delimited", "GET", "HTTP/1.1 200 OK\r\n\r\nabc", false},
		{"connection close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na", false},
		{"http/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\na", false},
		{"two lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na", false},
		{"pragma", "GET", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\na", false},
		{"folded", "GET", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 1\r\n\r\na", false},
		{"bare LF", "GET", "HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\na", false},
		{"1xx first", "GET", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", false},
		{"no content", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", false},
		{"short body", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", true},
		{"ctl in value", "GET", "HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 1\r\n\r\na", false},
		{"space in name", "GET", "HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 1\r\n\r\na", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if fast := checkAnswerParity(t, tt.method, []byte(tt.answer)); fast != tt.fast {
				t.Errorf("fast path %v, want %v", fast, tt.fast)
			}
		})
	}
}

// FuzzAnswerHead compares readAnswer with http.ReadResponse on any
// answer: where readAnswer reads it itself, the Response and the body
// must be http.ReadResponse's.
func FuzzAnswerHead(f *testing.F) {
	f.Add(false, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"))
	f.Add(false, []byte("HTTP/1.1 301 Moved\r\nLocation: /x\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nContent-Length: 0\r\n\r\n"))
	f.Add(true, []byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"))
	f.Add(false, []byte("HTTP/1.1 200 OK\r\ncontent-LENGTH: 007\r\nX: \t\r\n\r\nabcdefgh"))
	f.Add(false, []byte("HTTP/1.1 200 \xff\r\nX-\xff: a\r\nContent-Length: 1\r\n\r\na"))
	f.Fuzz(func(t *testing.T, head bool, answer []byte) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		checkAnswerParity(t, method, answer)
	})
}

// TestReadAnswerSameConn reads two answers on one connection: the
// second's header map (the connection's, reused) has nothing of the
// first's.
func TestReadAnswerSameConn(t *testing.T) {
	c := &upConn{}
	c.br = bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nX-First: 1\r\nContent-Length: 1\r\n\r\na" +
		"HTTP/1.1 200 OK\r\nX-Second: 2\r\nContent-Length: 1\r\n\r\nb"))
	r, _ := http.NewRequest("GET", "http://app/", nil)
	for i, want := range []http.Header{
		{"X-First": {"1"}, "Content-Length": {"1"}},
		{"X-Second": {"2"}, "Content-Length": {"1"}},
	} {
		resp, err := readAnswer(c, r)
		if err != nil {
			t.Fatal(err)
		}
		if resp != &c.resp {
			t.Fatalf("answer %d: not read by readAnswer itself", i)
		}
		if !reflect.DeepEqual(resp.Header, want) {
			t.Errorf("answer %d: header %v, want %v", i, resp.Header, want)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
}
