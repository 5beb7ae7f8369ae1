// Package objstore keeps large blobs (a suspended macOS VM's bundle) in
// S3-compatible object storage: streaming uploads in parallel multipart
// parts, optional zstd compression on the way in and out, ranged parallel
// downloads, and deletes.
//
// It is built on github.com/minio/minio-go/v7 (Apache-2.0): one module
// with a handful of dependencies that speaks to AWS S3, MinIO, SeaweedFS,
// Ceph RGW and R2 alike, and whose PutObject streams a body of unknown
// length in NumThreads concurrent parts (ConcurrentStreamParts). The AWS
// SDK v2 would do the same through its transfer manager, but at the price
// of a dozen modules, a config chain that reads ~/.aws and IMDS by
// default, and a transfer manager still at v0.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Compression says how an object's bytes are stored.
type Compression string

const (
	// None stores the bytes as given.
	None Compression = ""
	// Zstd compresses while uploading and decompresses while
	// downloading; a VM bundle's zero pages shrink to almost nothing.
	Zstd Compression = "zstd"
)

const (
	// MinPartSize is S3's smallest part but the last.
	MinPartSize = 5 << 20
	// DefaultPartSize balances memory (Parallel parts are buffered at
	// once) against request count: a 16 GiB bundle is 1,024 parts.
	DefaultPartSize = 16 << 20
	// DefaultParallel is how many parts move at once.
	DefaultParallel = 4

	// Object metadata that says how to read the object back. S3 keeps it
	// as x-amz-meta-* headers; minio-go returns it canonicalised.
	metaEncoding = "Sbx-Encoding"
)

// ErrNotFound is returned by Get, Stat and Delete's callers for a key
// the bucket does not hold.
var ErrNotFound = errors.New("objstore: object not found")

// Config says where the store is and how hard to push it.
type Config struct {
	// Endpoint is host:port of the S3 API, without a scheme.
	Endpoint string
	// Secure uses HTTPS.
	Secure bool
	// Region is sent in signatures; most non-AWS servers accept any.
	Region string
	// Bucket holds every object of this store.
	Bucket string
	// AccessKey and SecretKey sign requests. They are never logged or
	// put in errors.
	AccessKey, SecretKey string
	// PartSize is the multipart part size (and the download range size);
	// 0 means DefaultPartSize, and less than MinPartSize is raised to it.
	PartSize int64
	// Parallel is how many parts are uploaded or downloaded at once by
	// default; 0 means DefaultParallel.
	Parallel int
	// Transport, if set, carries the requests (tests, custom TLS).
	Transport http.RoundTripper
}

// SetEndpoint takes the endpoint as an operator writes it:
// http://HOST:PORT, https://HOST:PORT, or HOST:PORT for HTTPS.
func (c *Config) SetEndpoint(endpoint string) {
	c.Endpoint, c.Secure = endpoint, true
	if rest, ok := strings.CutPrefix(endpoint, "http://"); ok {
		c.Endpoint, c.Secure = rest, false
	} else if rest, ok := strings.CutPrefix(endpoint, "https://"); ok {
		c.Endpoint = rest
	}
	c.Endpoint = strings.TrimSuffix(c.Endpoint, "/")
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Endpoint == "":
		return errors.New("objstore: Endpoint is empty")
	case strings.Contains(c.Endpoint, "://"):
		return fmt.Errorf("objstore: Endpoint %q has a scheme; give host:port and set Secure", c.Endpoint)
	case c.Bucket == "":
		return errors.New("objstore: Bucket is empty")
	case c.AccessKey == "" || c.SecretKey == "":
		return errors.New("objstore: AccessKey and SecretKey are required")
	case c.PartSize < 0:
		return errors.New("objstore: PartSize is negative")
	case c.Parallel < 0:
		return errors.New("objstore: Parallel is negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.PartSize < MinPartSize {
		c.PartSize = MinPartSize
	}
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	return c
}

// Store is a bucket of an S3-compatible server. It is safe for concurrent
// use.
type Store struct {
	cfg    Config
	client *minio.Client
}

// New returns a Store; it sends no request.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.Secure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
		// Path-style: SeaweedFS, MinIO and Ceph on a bare host:port have no
		// wildcard DNS for bucket subdomains.
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: client for %s: %w", cfg.Endpoint, err)
	}
	return &Store{cfg: cfg, client: c}, nil
}

// EnsureBucket creates the bucket if it does not exist.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return fmt.Errorf("objstore: bucket %s exists: %w", s.cfg.Bucket, err)
	}
	if ok {
		return nil
	}
	if err := s.client.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region}); err != nil {
		// Another process may have made it meanwhile.
		if resp := minio.ToErrorResponse(err); resp.Code == "BucketAlreadyOwnedByYou" || resp.Code == "BucketAlreadyExists" {
			return nil
		}
		return fmt.Errorf("objstore: make bucket %s: %w", s.cfg.Bucket, err)
	}
	return nil
}

// PutOptions tune one upload; zero fields take the Store's defaults.
type PutOptions struct {
	Compression Compression
	// Parallel is how many parts are in flight at once (each buffered
	// in memory, so memory is Parallel × PartSize).
	Parallel int
	PartSize int64
	// ContentType is stored with the object.
	ContentType string
}

// Put streams r to key, replacing any object there, and returns the
// bytes stored (after compression). r is read to EOF; its length need not
// be known. A failed upload leaves no object and no dangling parts.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (stored int64, err error) {
	parallel, partSize := s.cfg.Parallel, s.cfg.PartSize
	if opts.Parallel > 0 {
		parallel = opts.Parallel
	}
	if opts.PartSize > 0 {
		partSize = max(opts.PartSize, MinPartSize)
	}
	po := minio.PutObjectOptions{
		ContentType: opts.ContentType,
		PartSize:    uint64(partSize),
		NumThreads:  uint(parallel),
		// Parts of a stream of unknown length are read into Parallel
		// buffers and sent concurrently; without this, minio-go sends
		// them one by one.
		ConcurrentStreamParts: parallel > 1,
		UserMetadata:          map[string]string{},
	}
	body := r
	var encDone chan error
	switch opts.Compression {
	case None:
	case Zstd:
		po.UserMetadata[metaEncoding] = string(Zstd)
		pr, pw := io.Pipe()
		encDone = make(chan error, 1)
		go func() {
			encDone <- compress(pw, r)
		}()
		// If the upload stops early, unblock the encoder's writes.
		defer func() {
			pr.CloseWithError(errors.New("objstore: upload ended"))
			if e := <-encDone; err == nil && e != nil {
				err = fmt.Errorf("objstore: put %s: compress: %w", key, e)
			}
		}()
		body = pr
	default:
		return 0, fmt.Errorf("objstore: put %s: unknown compression %q", key, opts.Compression)
	}
	info, err := s.client.PutObject(ctx, s.cfg.Bucket, key, body, -1, po)
	if err != nil {
		return 0, fmt.Errorf("objstore: put %s: %w", key, err)
	}
	return info.Size, nil
}

// compress copies r through a zstd encoder into pw and closes pw with the
// outcome, so the reader sees EOF or the error.
func compress(pw *io.PipeWriter, r io.Reader) error {
	// SpeedFastest: bundles are mostly zero pages and already-compressed
	// data, where higher levels buy little and cost the cycle time the
	// suspend is measured by.
	enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		pw.CloseWithError(err)
		return err
	}
	if _, err := io.Copy(enc, r); err != nil {
		enc.Close()
		pw.CloseWithError(err)
		return err
	}
	err = enc.Close()
	pw.CloseWithError(err) // nil closes with EOF
	return err
}

// Info describes a stored object.
type Info struct {
	// Stored is the object's size in the store.
	Stored      int64
	Compression Compression
	ETag        string
}

// Stat returns the object's description, or ErrNotFound.
func (s *Store) Stat(ctx context.Context, key string) (Info, error) {
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if isNotFound(err) {
			return Info{}, fmt.Errorf("objstore: stat %s: %w", key, ErrNotFound)
		}
		return Info{}, fmt.Errorf("objstore: stat %s: %w", key, err)
	}
	return Info{Stored: oi.Size, ETag: oi.ETag, Compression: Compression(oi.UserMetadata[metaEncoding])}, nil
}

// Get writes the object's original bytes to w (decompressed if it was
// stored compressed) and returns how many it wrote. An object larger than
// one part is fetched in ranged requests, Parallel at once, written in
// order; every range is pinned to the ETag seen first, so an object
// replaced mid-download fails rather than mixing two versions.
func (s *Store) Get(ctx context.Context, key string, w io.Writer) (int64, error) {
	return s.GetParallel(ctx, key, w, 0)
}

// GetParallel is Get with parallel ranges in flight (0: the Store's
// default).
func (s *Store) GetParallel(ctx context.Context, key string, w io.Writer, parallel int) (int64, error) {
	if parallel <= 0 {
		parallel = s.cfg.Parallel
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return 0, err
	}
	switch info.Compression {
	case None:
		n, err := s.download(ctx, key, info, w, parallel)
		if err != nil {
			return n, fmt.Errorf("objstore: get %s: %w", key, err)
		}
		return n, nil
	case Zstd:
		n, err := s.getZstd(ctx, key, info, w, parallel)
		if err != nil {
			return n, fmt.Errorf("objstore: get %s: %w", key, err)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("objstore: get %s: stored with unknown compression %q", key, info.Compression)
	}
}

// getZstd downloads into a pipe that a decoder reads, writing to w.
func (s *Store) getZstd(ctx context.Context, key string, info Info, w io.Writer, parallel int) (int64, error) {
	pr, pw := io.Pipe()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		dec, err := zstd.NewReader(pr, zstd.WithDecoderConcurrency(1))
		if err != nil {
			pr.CloseWithError(err)
			done <- result{err: err}
			return
		}
		n, err := io.Copy(w, dec)
		dec.Close()
		// Unblock the downloader if the decoder stopped first.
		pr.CloseWithError(errors.Join(err, errors.New("objstore: decoder stopped")))
		done <- result{n, err}
	}()
	_, dlErr := s.download(ctx, key, info, pw, parallel)
	pw.CloseWithError(dlErr)
	r := <-done
	if dlErr != nil && !errors.Is(dlErr, io.ErrClosedPipe) {
		return r.n, dlErr
	}
	if r.err != nil {
		return r.n, fmt.Errorf("decompress: %w", r.err)
	}
	return r.n, dlErr
}

// Delete removes key. Deleting a missing key is not an error (S3's
// DeleteObject is idempotent).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, key, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("objstore: delete %s: %w", key, err)
	}
	return nil
}

func isNotFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound" || code == "NoSuchObject"
}
