package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// InProcess returns a Doer that serves each request with h in this
// process, as control's own MCP endpoint calls the REST API: the same
// handler chain (authentication, quotas, problems) without a network hop.
// The response body streams while the handler runs (event streams work);
// closing it cancels the request's context and waits for the handler.
func InProcess(h http.Handler) HttpRequestDoer { return inProcess{h} }

type inProcess struct{ h http.Handler }

// errBodyClosed is what a handler's writes fail with after the client
// closed the response body.
var errBodyClosed = errors.New("in-process response body closed")

func (d inProcess) Do(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	req = req.Clone(ctx)
	if req.Body == nil {
		req.Body = http.NoBody
	}
	req.RequestURI = req.URL.RequestURI()
	req.RemoteAddr = "in-process"
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, pw: pw, started: make(chan struct{})}
	done := make(chan struct{})
	go func() { // owned by the response body: Close waits for it
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				// http.ErrAbortHandler: a response cut short on purpose.
				w.WriteHeader(http.StatusInternalServerError)
				_ = pw.CloseWithError(fmt.Errorf("handler aborted: %v: %w", v, io.ErrUnexpectedEOF))
			}
		}()
		d.h.ServeHTTP(w, req)
		w.WriteHeader(http.StatusOK)
		_ = pw.Close()
	}()
	<-w.started
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: &pipeBody{pr: pr, cancel: cancel, done: done},
		ContentLength: -1, Request: req,
	}, nil
}

// pipeResponse is the handler's side: headers are handed over at
// WriteHeader, the body through a pipe (each Write waits for the reader,
// so Flush has nothing to do).
type pipeResponse struct {
	header  http.Header
	sent    http.Header
	status  int
	once    sync.Once
	started chan struct{}
	pw      *io.PipeWriter
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.started)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}

// Flush lets http.ResponseController flush (event streams); see the type.
func (w *pipeResponse) Flush() {}

type pipeBody struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *pipeBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *pipeBody) Close() error {
	b.cancel()
	_ = b.pr.CloseWithError(errBodyClosed)
	<-b.done
	return nil
}
