package deploy_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control/provider/k8s"
)

// TestSandboxImageMatchesPodSpec: the sandbox image is what the k8s
// provider's pod spec expects: sbx-init as entrypoint, the non-root user
// the pod runs as, the Secret and workspace where the pod mounts them,
// sshd on the SSH port, the forwarder on its port.
func TestSandboxImageMatchesPodSpec(t *testing.T) {
	b, err := os.ReadFile("docker/sandbox.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		`ENTRYPOINT ["/usr/local/bin/sbx-init"]`,
		"USER 1000:1000",
		"useradd --uid 1000 --gid 1000 --home-dir /home/" + k8s.SandboxUser,
		"SBX_SECRET_DIR=" + k8s.SecretDir,
		"SBX_WORKSPACE=" + k8s.LinuxWorkspace,
		"SBX_SSH_PORT=2222",
		"SBX_FORWARD_PORT=2223",
		"EXPOSE 2222 2223",
		"openssh-server",
		"./cmd/sbx-init",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("sandbox.Dockerfile lacks %q", want)
		}
	}
}
