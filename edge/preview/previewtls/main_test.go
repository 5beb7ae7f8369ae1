package previewtls_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Two library goroutines outlive every test by design and are not ours to
// stop: certmagic keeps one rate limiter per ACME account for the life of
// the process, and pebble (the test CA) starts validation workers with no
// way to end them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).permit"),
		goleak.IgnoreTopFunction("github.com/letsencrypt/pebble/v2/va.VAImpl.processTasks"),
	)
}
