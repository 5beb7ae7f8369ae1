package sshbroker

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestClientLegCiphers: OpenSSH as shipped (chacha20-poly1305 first on
// its list) ends up on AES-GCM with the broker, and clients that cannot
// do AES-GCM keep what they offer.
func TestClientLegCiphers(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	negotiated := regexp.MustCompile(`kex: client->server cipher: (\S+)`)
	for _, c := range []struct {
		name string
		opts []string
		want string
	}{
		{"openssh-defaults", nil, "aes128-gcm@openssh.com"},
		{"chacha-only", []string{"-c", "chacha20-poly1305@openssh.com"}, "chacha20-poly1305@openssh.com"},
		{"ctr-only", []string{"-c", "aes256-ctr"}, "aes256-ctr"},
		{"aes256-gcm-only", []string{"-c", "aes256-gcm@openssh.com"}, "aes256-gcm@openssh.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", append([]string{"-v"}, c.opts...), "echo ok"), nil)
			m := negotiated.FindStringSubmatch(r.stderr)
			if r.code != 0 || r.stdout != "ok\n" || m == nil || m[1] != c.want {
				t.Fatalf("ssh %v: code %d stdout %q cipher %q, want 0 \"ok\\n\" %q; stderr:\n%s", c.opts, r.code, r.stdout, m, c.want, r.stderr)
			}
		})
	}
	t.Run("x/crypto-chacha-only", func(t *testing.T) {
		nc, err := net.DialTimeout("tcp", e.addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(sshCeiling))
		conn, chans, reqs, err := ssh.NewClientConn(nc, e.addr, &ssh.ClientConfig{
			Config:          ssh.Config{Ciphers: []string{ssh.CipherChaCha20Poly1305}},
			User:            "alpha",
			Auth:            []ssh.AuthMethod{ssh.PublicKeys(k.signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), // the host key is not under test here
		})
		if err != nil {
			t.Fatalf("chacha-only x/crypto client: %v", err)
		}
		c := ssh.NewClient(conn, chans, reqs)
		defer c.Close()
		mustEcho(t, c, "ok", "echo ok")
	})
}

// TestKexInitForWaitingClient: a client that waits for the server's
// KEXINIT before sending its own still gets one (with the default list,
// chacha20-poly1305 included), after the broker stops waiting.
func TestKexInitForWaitingClient(t *testing.T) {
	e := newEnv(t, nil)
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(nc, "SSH-2.0-Waiting_1.0\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "SSH-2.0-sbx-broker") {
		t.Fatalf("server version line %q: %v", line, err)
	}
	var hdr [5]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatalf("no KEXINIT from the broker: %v", err)
	}
	pkt := make([]byte, binary.BigEndian.Uint32(hdr[:4])-1)
	if _, err := io.ReadFull(br, pkt); err != nil {
		t.Fatal(err)
	}
	if pkt[0] != 20 || !strings.Contains(string(pkt), "chacha20-poly1305@openssh.com") {
		t.Fatalf("first packet %q: want a KEXINIT offering chacha20-poly1305", pkt)
	}
}

func TestClientCiphersParse(t *testing.T) {
	kexinit := func(c2s, s2c string) []byte {
		payload := append([]byte{20}, make([]byte, 16)...)
		for _, l := range []string{"curve25519-sha256", "ssh-ed25519", c2s, s2c, "hmac-sha2-256", "hmac-sha2-256", "none", "none", "", ""} {
			payload = binary.BigEndian.AppendUint32(payload, uint32(len(l)))
			payload = append(payload, l...)
		}
		payload = append(payload, 0, 0, 0, 0, 0)
		pad := 8 - (len(payload)+5)%8 + 4
		pkt := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+pad+1))
		pkt = append(pkt, byte(pad))
		pkt = append(pkt, payload...)
		return append(pkt, make([]byte, pad)...)
	}
	const ver = "SSH-2.0-OpenSSH_9.2\r\n"
	full := append([]byte(ver), kexinit("chacha20-poly1305@openssh.com,aes128-ctr,aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com,aes256-gcm@openssh.com")...)
	for _, c := range []struct {
		name     string
		in       []byte
		want     []string
		wantDone bool
	}{
		{"openssh", full, gcmCiphers, true},
		{"partial version", []byte("SSH-2.0-Open"), nil, false},
		{"partial packet", full[:len(full)-3], nil, false},
		{"chacha only", append([]byte(ver), kexinit("chacha20-poly1305@openssh.com", "chacha20-poly1305@openssh.com")...), nil, true},
		{"gcm one way only", append([]byte(ver), kexinit("aes128-gcm@openssh.com", "aes128-ctr")...), nil, true},
		{"banner lines first", append([]byte("hello\r\n"+ver), kexinit("aes128-gcm@openssh.com", "aes128-gcm@openssh.com")...), gcmCiphers, true},
		{"not a kexinit", append([]byte(ver), 0, 0, 0, 12, 4, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), nil, true},
		{"absurd length", append([]byte(ver), 0xff, 0xff, 0xff, 0xff, 4), nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, done := clientCiphers(c.in)
			if done != c.wantDone || strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Fatalf("clientCiphers: got %v %v, want %v %v", got, done, c.want, c.wantDone)
			}
		})
	}
}
