package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// process is one binary the cluster runs. Its output is kept in a bounded
// buffer and shown when it fails to start or dies.
type process struct {
	name string
	path string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when cmd has exited
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &tailBuffer{max: 64 << 10}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a stop reaches children too and a ^C in
	// the terminal running go test does not race the harness's stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.out, p.done = cmd, out, done
	return nil
}

// stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// exited reports whether the process has ended, and its output if so.
func (p *process) exited() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return "", true
	}
	select {
	case <-p.done:
		return p.out.String(), true
	default:
		return "", false
	}
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// waitHealthy polls url until it answers 200, the process dies or ctx
// ends.
func (p *process) waitHealthy(ctx context.Context, client *http.Client, url string) error {
	var last error
	for {
		if out, dead := p.exited(); dead {
			return fmt.Errorf("%s exited while starting:\n%s", p.name, out)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w (last: %v)\n%s", p.name, ctx.Err(), last, p.output())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freePorts reserves n distinct loopback ports. They are released before
// the binaries bind them, so another process could take one in between;
// the start-up check reports that as a failed start.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func etcdProcess(bin, dir string, clientPort, peerPort int) *process {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	return &process{name: "etcd", path: bin, args: []string{
		"--name=kubetest",
		"--data-dir=" + dir,
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=kubetest=" + peer,
		// A test cluster's data is thrown away: fsync buys nothing.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}}
}

func apiserverProcess(bin string, p *pki, etcdPort, securePort int) *process {
	return &process{name: "kube-apiserver", path: bin, args: []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(securePort),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// PodSecurity is on by default; ServiceAccount admission is too,
		// which is why Namespace creates each namespace's default SA.
		"--enable-admission-plugins=PodSecurity",
		// On loopback there is no Service network to reconcile the
		// kubernetes endpoint into.
		"--endpoint-reconciler-type=none",
		"--v=0",
	}}
}

// tlsClient trusts the cluster's CA and presents the admin certificate.
func tlsClient(p *pki) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.caPEM) {
		return nil, errors.New("kubetest: bad CA PEM")
	}
	cert, err := tls.X509KeyPair(p.adminCertPEM, p.adminKeyPEM)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
