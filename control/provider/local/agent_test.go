package local_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// TestAgentForwarding: a session whose client forwards its agent (ssh -A)
// can use it, in either server mode, and the socket is gone when the
// session ends; a session that did not ask has no SSH_AUTH_SOCK.
func TestAgentForwarding(t *testing.T) {
	perMode(t, time.Minute, func(t *testing.T, ctx context.Context, mode string) {
		f, _, _, ep := provisioned(ctx, t, mode, "sbx-agent")
		signer, err := f.ca.UserSigner(ep.User, "agent-test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		dial := func() *ssh.Client {
			c, err := ssh.Dial("tcp", ep.Addr, &ssh.ClientConfig{
				User: ep.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
				HostKeyCallback: ssh.FixedHostKey(f.hostKey), Timeout: 10 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}

		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keyring := agent.NewKeyring()
		if err := keyring.Add(agent.AddedKey{PrivateKey: key, Comment: "forwarded-key"}); err != nil {
			t.Fatal(err)
		}
		c := dial()
		if err := agent.ForwardToAgent(c, keyring); err != nil {
			t.Fatal(err)
		}
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.RequestAgentForwarding(s); err != nil {
			t.Fatal(err)
		}
		out, err := s.CombinedOutput(`echo "$SSH_AUTH_SOCK"; ssh-add -l`)
		if err != nil || !strings.Contains(string(out), "forwarded-key") {
			t.Fatalf("ssh-add -l with the agent forwarded: %v\n%s", err, out)
		}
		sock := strings.SplitN(string(out), "\n", 2)[0]
		if mode == "embedded" {
			// sshd removes its socket on its own schedule; ours goes with
			// the session, once its handler has returned (which may be
			// just after the client saw the exit status).
			for deadline := time.Now().Add(10 * time.Second); ; {
				s2, err := c.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				out, err := s2.CombinedOutput("test -e " + sock + " && echo still there")
				if !strings.Contains(string(out), "still there") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("agent socket %s outlived its session by 10 s: %v %s", sock, err, out)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}

		s3, err := dial().NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := s3.CombinedOutput(`echo "sock=$SSH_AUTH_SOCK"`); err != nil || string(out) != "sock=\n" {
			t.Fatalf("a session that did not ask for the agent: %v %q, want no SSH_AUTH_SOCK", err, out)
		}
	})
}
