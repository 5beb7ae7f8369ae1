package sandboxinit

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// TestServicesStartFromTheSecret runs the init as a warm pod has it: the
// services the claim's Secret declares (initproto.ServicesFile) start at
// the install, with no call to the init; a later change of the Secret
// reinstalls the keys but leaves the running set alone, since control's
// calls are its authority by then.
func TestServicesStartFromTheSecret(t *testing.T) {
	pod := newPodDirs(t)
	key1PEM, _, _ := sshca.GenerateKey()
	key2PEM, _, _ := sshca.GenerateKey()
	secret, run, ws := pod.secret, pod.run, pod.ws
	pod.runInit(t, 0)

	secretFiles := func(key []byte, svcs ...initproto.Service) map[string][]byte {
		b, err := initproto.EncodeServices(svcs)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{"host_key": key, "user_ca.pub": []byte(pod.ca.AuthorizedKey()), initproto.ServicesFile: b}
	}
	web := initproto.Service{Name: "web", Command: "echo up >> web.starts; exec sleep 600"}
	if err := inittest.WriteSecret(secret, 1, secretFiles(key1PEM, web)); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 10*time.Second, "web started from the secret", func() bool {
		_, err := os.Stat(filepath.Join(ws, "web.starts"))
		return err == nil
	})
	if got := listServices(t, SocketPath(run)); len(got) != 1 || got[0].Name != "web" || got[0].Starts != 1 {
		t.Fatalf("the init runs %+v, want web started once", got)
	}

	// A later Secret (the keys change) declares another set: the keys
	// are reinstalled, the services are not touched.
	other := initproto.Service{Name: "other", Command: "echo up >> other.starts; exec sleep 600"}
	if err := inittest.WriteSecret(secret, 2, secretFiles(key2PEM, other)); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 10*time.Second, "the second secret's host key installed", func() bool {
		b, err := os.ReadFile(filepath.Join(run, "host_key"))
		return err == nil && bytes.Equal(b, key2PEM)
	})
	if got := listServices(t, SocketPath(run)); len(got) != 1 || got[0].Name != "web" || got[0].Starts != 1 {
		t.Errorf("after the secret changed the init runs %+v, want web alone, started once", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "other.starts")); err == nil {
		t.Error("the second secret's service started")
	}
}

// listServices asks the init listening on sock what it runs.
func listServices(t *testing.T, sock string) []initproto.Status {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c).Encode(Request{Op: "list"}); err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil || resp.Error != "" {
		t.Fatalf("list: %+v, %v", resp, err)
	}
	return resp.Services
}
