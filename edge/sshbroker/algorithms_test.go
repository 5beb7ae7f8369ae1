package sshbroker

import (
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestNoSHA1Algorithms (issue 27): a client that forces a SHA-1 key
// exchange or MAC is refused at key exchange; a client with x/crypto's
// modern defaults, and OpenSSH as shipped, get in.
func TestNoSHA1Algorithms(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	dial := func(cfg ssh.Config) (*ssh.Client, error) {
		nc, err := net.DialTimeout("tcp", e.addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.SetDeadline(time.Now().Add(sshCeiling))
		conn, chans, reqs, err := ssh.NewClientConn(nc, e.addr, &ssh.ClientConfig{
			Config:          cfg,
			User:            "alpha",
			Auth:            []ssh.AuthMethod{ssh.PublicKeys(k.signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), // the host key is not under test here
		})
		if err != nil {
			nc.Close()
			return nil, err
		}
		return ssh.NewClient(conn, chans, reqs), nil
	}
	for _, c := range []struct {
		name string
		cfg  ssh.Config
	}{
		{"diffie-hellman-group14-sha1", ssh.Config{KeyExchanges: []string{ssh.InsecureKeyExchangeDH14SHA1}}},
		{"diffie-hellman-group1-sha1", ssh.Config{KeyExchanges: []string{ssh.InsecureKeyExchangeDH1SHA1}}},
		{"hmac-sha1", ssh.Config{Ciphers: []string{ssh.CipherAES128CTR}, MACs: []string{ssh.HMACSHA1}}},
		{"hmac-sha1-96", ssh.Config{Ciphers: []string{ssh.CipherAES128CTR}, MACs: []string{ssh.InsecureHMACSHA196}}},
	} {
		t.Run("refused/"+c.name, func(t *testing.T) {
			if cl, err := dial(c.cfg); err == nil {
				cl.Close()
				t.Fatalf("a client forcing %s connected", c.name)
			}
		})
	}
	t.Run("modern x/crypto client", func(t *testing.T) {
		cl, err := dial(ssh.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		mustEcho(t, cl, "ok", "echo ok")
	})
	t.Run("OpenSSH forcing group14-sha1", func(t *testing.T) {
		r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", []string{"-o", "KexAlgorithms=diffie-hellman-group14-sha1"}, "echo ok"), nil)
		if r.code == 0 {
			t.Fatalf("OpenSSH with diffie-hellman-group14-sha1 got in: %q", r.stdout)
		}
	})
	t.Run("OpenSSH as shipped", func(t *testing.T) {
		r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "echo ok"), nil)
		if r.code != 0 || r.stdout != "ok\n" {
			t.Fatalf("code %d stdout %q, want 0 ok; stderr:\n%s", r.code, r.stdout, r.stderr)
		}
	})
}
