package authority

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine running: the
// expiry timer's callback must not outlive its Registry.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
