package previewroute

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// oneSandbox is a Reader with one port on one sandbox.
type oneSandbox struct{ sb store.Sandbox }

func (o oneSandbox) PreviewPortByLabel(_ context.Context, label string) (store.PreviewPort, error) {
	return store.PreviewPort{SandboxID: o.sb.ID, AccountID: o.sb.AccountID, Port: 3000, Label: label}, nil
}

func (o oneSandbox) Sandbox(context.Context, string) (store.Sandbox, error) { return o.sb, nil }

func (oneSandbox) AccountByTokenHash(context.Context, []byte, time.Time) (store.Account, store.Token, error) {
	return store.Account{}, store.Token{}, store.ErrNotFound
}

// TestResolveAdmission: a route carries lifecycle's admission and reaches
// the server only when it is Ready; an ended sandbox has no route, and
// is refused as ended (the proxy's 410), not as an unknown host.
func TestResolveAdmission(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state store.State
		want  lifecycle.Admission
	}{
		{store.StatePending, lifecycle.Starting},
		{store.StateReady, lifecycle.Ready},
		{store.StateSuspending, lifecycle.Wakeable},
		{store.StateSuspended, lifecycle.Wakeable},
		{store.StateRestoring, lifecycle.Wakeable},
		{store.StateTerminating, lifecycle.Ended},
		{store.StateTerminated, lifecycle.Ended},
		{store.StateFailed, lifecycle.Ended},
	} {
		sb := store.Sandbox{ID: "sb1", AccountID: "a1", State: tc.state, Endpoint: "10.0.0.7:22", HostKey: "ssh-ed25519 AAAA"}
		rt, err := New(oneSandbox{sb}, nil).Resolve(context.Background(), "label")
		if tc.want == lifecycle.Ended {
			if !errors.Is(err, ErrEnded) {
				t.Errorf("%s: Resolve = %+v, %v; want ErrEnded", tc.state, rt, err)
			}
			continue
		}
		if err != nil || rt.Admission != tc.want || (rt.Addr != "") != (tc.want == lifecycle.Ready) {
			t.Errorf("%s: Resolve = %+v, %v; want admission %v, an address only when ready", tc.state, rt, err, tc.want)
		}
	}
}
