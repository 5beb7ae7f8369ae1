package sshbroker

import (
	crand "crypto/rand"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// directKey writes a key and a CA-signed certificate next to it, so the
// OpenSSH client can log in to the sandbox's sshd without the broker.
func (e *env) directKey() key {
	e.t.Helper()
	k := e.newKey("direct")
	caSigner, err := ssh.ParsePrivateKey(e.caPEM)
	if err != nil {
		e.t.Fatal(err)
	}
	cert := &ssh.Certificate{
		Key: k.signer.PublicKey(), CertType: ssh.UserCert, KeyId: "bench",
		ValidPrincipals: []string{e.up.User},
		ValidAfter:      uint64(time.Now().Add(-time.Minute).Unix()),
		ValidBefore:     uint64(time.Now().Add(time.Hour).Unix()),
	}
	if err := cert.SignCert(crand.Reader, caSigner); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(k.path+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return k
}

// BenchmarkBulkThroughput pushes the same stream through the broker and
// straight to the same sshd, with the same OpenSSH client, in one run, and
// reports both rates and their ratio (1.0 = the broker costs nothing).
func BenchmarkBulkThroughput(b *testing.B) {
	e := newEnv(b, nil)
	viaBroker := e.grant("alpha", nil)
	direct := e.directKey()
	host, port, _ := splitHostPort(e.up.Addr)
	known := e.dir + "/known_direct"
	if err := os.WriteFile(known, []byte("["+host+"]:"+port+" "+e.up.HostKey+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	const size = 256 << 20
	push := func(cmd *exec.Cmd) time.Duration {
		cmd.Stdin = io.LimitReader(rand.NewChaCha8([32]byte{}), size)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v: %s", cmd.Args, err, out)
		}
		return time.Since(start)
	}
	var brokerT, directT time.Duration
	b.ResetTimer()
	for b.Loop() {
		brokerT += push(e.ssh(b.Context(), viaBroker, "alpha", nil, "cat >/dev/null"))
		args := []string{"-F", "/dev/null", "-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes",
			"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-i", direct.path, "-p", port, e.up.User + "@" + host, "cat >/dev/null"}
		directT += push(exec.CommandContext(b.Context(), "ssh", args...))
	}
	mib := float64(size>>20) * float64(b.N)
	b.ReportMetric(mib/brokerT.Seconds(), "broker_MiB/s")
	b.ReportMetric(mib/directT.Seconds(), "direct_MiB/s")
	b.ReportMetric(directT.Seconds()/brokerT.Seconds(), "broker/direct")
}
