package podtcp

// Target says how to reach one sandbox: its sshd and its port forwarder.
// It comes from the provider's Endpoint plus the host key control
// generated and pinned. podssh.Target is this type.
type Target struct {
	SandboxID string
	// Addr is host:port of the sandbox's sshd.
	Addr string
	// User is the login name; the certificate's only principal.
	User string
	// HostKey is the pinned public host key in authorized_keys form.
	HostKey string
	// Workspace is the absolute workspace path inside the sandbox; the
	// default Dir for Pool.Exec.
	Workspace string
	// ForwardAddr is host:port of the sandbox's port forwarder (package
	// podtcp), the plain-TCP road the preview proxy takes to the
	// sandbox's ports; empty when the sandbox has none.
	ForwardAddr string
}
