package s3bundles_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider/tart/s3bundles"
	"github.com/sbxedge/sbx/internal/objstore"
	"github.com/sbxedge/sbx/internal/objstore/s3test"
)

// TestBundles runs against one real weed server (it takes seconds to
// start).
func TestBundles(t *testing.T) {
	srv := s3test.New(t)
	t.Run("round trip", func(t *testing.T) { testRoundTrip(t, srv) })
	t.Run("bad credentials", func(t *testing.T) { testBadCredentials(t, srv) })
}

// testRoundTrip: a bundle larger than several parts goes up compressed
// and comes back byte for byte, and Exists and Delete follow it.
func testRoundTrip(t *testing.T, srv *s3test.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := srv.Config(s3test.Bucket("bundles"))
	cfg.PartSize, cfg.Parallel = objstore.MinPartSize, 3
	st, err := s3bundles.Open(ctx, cfg) // makes the bucket
	if err != nil {
		t.Fatal(err)
	}
	// A VM's bundle in small: zero pages with some noise, spanning
	// several parts before compression.
	bundle := make([]byte, 18<<20)
	for off := 0; off < len(bundle); off += 1 << 20 {
		_, _ = rand.Read(bundle[off : off+64<<10])
	}
	const key = "macos-bundles/s1.tvm"

	if ok, err := st.Exists(ctx, key); err != nil || ok {
		t.Fatalf("Exists before Put: %v %v", ok, err)
	}
	if err := st.Put(ctx, key, bytes.NewReader(bundle)); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Exists(ctx, key); err != nil || !ok {
		t.Fatalf("Exists after Put: %v %v", ok, err)
	}
	raw, err := objstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := raw.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Compression != objstore.Zstd || info.Stored >= int64(len(bundle)) {
		t.Fatalf("stored %+v; want zstd, smaller than %d", info, len(bundle))
	}
	var got bytes.Buffer
	if err := st.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), bundle) {
		t.Fatalf("Get: %d bytes, differ from the %d put", got.Len(), len(bundle))
	}
	t.Logf("bundle %d bytes stored as %d", len(bundle), info.Stored)

	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Exists(ctx, key); err != nil || ok {
		t.Fatalf("Exists after Delete: %v %v", ok, err)
	}
	if err := st.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of an absent bundle: %v", err)
	}
	if err := st.Get(ctx, key, &got); err == nil {
		t.Fatal("Get of a deleted bundle succeeded")
	}
}

// testBadCredentials: a wrong secret fails at Open, not at the first
// suspend, and the error does not carry the secret.
func testBadCredentials(t *testing.T, srv *s3test.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := srv.Config(s3test.Bucket("bundles"))
	cfg.SecretKey = "not-the-secret-0123456789"
	_, err := s3bundles.Open(ctx, cfg)
	if err == nil {
		t.Fatal("Open with a wrong secret succeeded")
	}
	if bytes.Contains([]byte(err.Error()), []byte(cfg.SecretKey)) {
		t.Fatalf("error carries the secret: %v", err)
	}
}
