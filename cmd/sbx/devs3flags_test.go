package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestS3FlagsConfig: --s3-endpoint's scheme picks HTTPS or plain HTTP,
// and the secret comes from the file flag or AWS_SECRET_ACCESS_KEY only.
func TestS3FlagsConfig(t *testing.T) {
	t.Parallel()
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(secret string) func(string) string {
		return func(k string) string {
			if k == "AWS_SECRET_ACCESS_KEY" {
				return secret
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name     string
		f        s3Flags
		envSec   string
		endpoint string
		secure   bool
		secret   string
		err      string
	}{
		{name: "http", f: s3Flags{endpoint: "http://127.0.0.1:8333/", bucket: "b", accessKey: "k"}, envSec: "s", endpoint: "127.0.0.1:8333", secret: "s"},
		{name: "https", f: s3Flags{endpoint: "https://s3.example.com", bucket: "b", accessKey: "k"}, envSec: "s", endpoint: "s3.example.com", secure: true, secret: "s"},
		{name: "bare is https", f: s3Flags{endpoint: "minio:9000", bucket: "b", accessKey: "k"}, envSec: "s", endpoint: "minio:9000", secure: true, secret: "s"},
		{name: "file wins", f: s3Flags{endpoint: "minio:9000", bucket: "b", accessKey: "k", secretKeyFile: secretFile}, envSec: "s", endpoint: "minio:9000", secure: true, secret: "from-the-file"},
		{name: "no secret", f: s3Flags{endpoint: "minio:9000", bucket: "b", accessKey: "k"}, err: "AWS_SECRET_ACCESS_KEY"},
		{name: "no access key", f: s3Flags{endpoint: "minio:9000", bucket: "b"}, envSec: "s", err: "AWS_ACCESS_KEY_ID"},
		{name: "missing file", f: s3Flags{endpoint: "minio:9000", bucket: "b", accessKey: "k", secretKeyFile: secretFile + ".nope"}, err: "--s3-secret-key-file"},
		{name: "no bucket", f: s3Flags{endpoint: "minio:9000", accessKey: "k"}, envSec: "s", err: "Bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.f.config(env(tc.envSec))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v; want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Endpoint != tc.endpoint || cfg.Secure != tc.secure || cfg.SecretKey != tc.secret {
				t.Fatalf("endpoint %q secure %v secret %q; want %q %v %q", cfg.Endpoint, cfg.Secure, cfg.SecretKey, tc.endpoint, tc.secure, tc.secret)
			}
		})
	}
}

// TestS3EndpointNeedsTart: the bucket is for macOS bundles only, so
// --s3-endpoint without --tart is a usage error, before anything starts.
func TestS3EndpointNeedsTart(t *testing.T) {
	t.Parallel()
	err := runDev(t.Context(), []string{"--tart", "", "--s3-endpoint", "127.0.0.1:1", "--data-dir", t.TempDir()})
	var u *usageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "--tart") {
		t.Fatalf("err %v; want a usage error naming --tart", err)
	}
}
