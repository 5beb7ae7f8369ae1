package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/minio/minio-go/v7"
)

// download writes the stored bytes of key to w. Up to parallel ranges of
// PartSize are fetched at once into buffers and written strictly in
// order, so memory stays at parallel × PartSize whatever the object's
// size.
func (s *Store) download(ctx context.Context, key string, info Info, w io.Writer, parallel int) (int64, error) {
	size, part := info.Stored, s.cfg.PartSize
	if parallel <= 1 || size <= part {
		opts := minio.GetObjectOptions{}
		if err := opts.SetMatchETag(info.ETag); err != nil {
			return 0, err
		}
		obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, opts)
		if err != nil {
			return 0, err
		}
		defer obj.Close()
		return io.Copy(w, obj)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(errors.New("objstore: download over"))
	n := int((size + part - 1) / part)
	// results[i] receives range i's bytes; each is buffered so a fetcher
	// never blocks on a writer that has stopped.
	results := make([]chan rangeResult, n)
	for i := range results {
		results[i] = make(chan rangeResult, 1)
	}
	// slots bounds the ranges fetched but not yet written. The launcher
	// takes them in range order and the writer frees them in range order,
	// so range i always starts before range i+parallel waits.
	slots := make(chan struct{}, parallel)
	pool := sync.Pool{New: func() any { b := make([]byte, part); return &b }}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			off := int64(i) * part
			length := min(part, size-off)
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := pool.Get().(*[]byte)
				b, err := s.fetchRange(ctx, key, info.ETag, off, (*buf)[:length])
				results[i] <- rangeResult{buf: buf, b: b, err: err}
			}()
		}
	}()

	var written int64
	for i := range n {
		var r rangeResult
		select {
		case r = <-results[i]:
		case <-ctx.Done():
			return written, context.Cause(ctx)
		}
		if r.err != nil {
			cancel(r.err)
			return written, fmt.Errorf("range %d of %d: %w", i+1, n, r.err)
		}
		m, err := w.Write(r.b)
		written += int64(m)
		pool.Put(r.buf)
		<-slots
		if err != nil {
			cancel(err)
			return written, err
		}
	}
	return written, nil
}

type rangeResult struct {
	buf *[]byte
	b   []byte
	err error
}

// fetchRange reads len(buf) bytes at off into buf.
func (s *Store) fetchRange(ctx context.Context, key, etag string, off int64, buf []byte) ([]byte, error) {
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+int64(len(buf))-1); err != nil {
		return nil, err
	}
	if err := opts.SetMatchETag(etag); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, opts)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	if _, err := io.ReadFull(obj, buf); err != nil {
		return nil, fmt.Errorf("bytes %d-%d: %w", off, off+int64(len(buf))-1, err)
	}
	return buf, nil
}
