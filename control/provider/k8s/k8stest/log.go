package k8stest

import (
	"fmt"
	"os"
	"path/filepath"
)

// InitLog is what the pod's init and its sshd have written so far (the
// container's log, as kubectl logs shows it): tests check that no secret
// shows there.
func (k *Kubelet) InitLog(pod string) ([]byte, error) {
	k.mu.Lock()
	r := k.pods[pod]
	k.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("no pod %s on this kubelet", pod)
	}
	return os.ReadFile(filepath.Join(r.dir, "init.log"))
}
