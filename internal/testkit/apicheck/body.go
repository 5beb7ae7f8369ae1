package apicheck

import (
	"bytes"
	"io"
	"net/http"
)

// readAll buffers a JSON response (bounded) and puts it back for the caller.
func readAll(resp *http.Response, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = 16 << 20
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}
