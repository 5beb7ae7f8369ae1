package sshbroker

import (
	"context"
	"errors"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/connlog"
)

// maxEnvNames bounds the names kept per connection for the client kind;
// a client sending thousands of env requests gains nothing.
const maxEnvNames = 64

// logRequest reads what a client's session request tells the connection
// log: the channel's kind (shell, exec, sftp) and, from env requests, the
// client's kind (VSCODE_*, SBX_CLIENT, ...; see connlog.Rules). Values
// other than SBX_CLIENT's are never kept.
func (cc *clientConn) logRequest(r *ssh.Request) {
	if cc.rec == nil {
		return
	}
	switch r.Type {
	case "shell":
		cc.rec.AddChannel(connlog.ChannelShell)
	case "exec":
		cc.rec.AddChannel(connlog.ChannelExec)
	case "subsystem":
		var m struct{ Name string }
		if ssh.Unmarshal(r.Payload, &m) == nil && m.Name == "sftp" {
			cc.rec.AddChannel(connlog.ChannelSFTP)
		} else {
			cc.rec.AddChannel(connlog.ChannelSession)
		}
	case "env":
		var m struct{ Name, Value string }
		if ssh.Unmarshal(r.Payload, &m) != nil {
			return
		}
		cc.mu.Lock()
		if len(cc.envNames) < maxEnvNames {
			cc.envNames = append(cc.envNames, connlog.Cut(m.Name, 64))
		}
		sig := connlog.Signals{Env: append([]string(nil), cc.envNames...), SSHVersion: cc.clientVersion}
		if m.Name == connlog.EnvClient {
			cc.explicit = m.Value
		}
		sig.Explicit = cc.explicit
		cc.mu.Unlock()
		cc.rec.SetClient(connlog.Detect(sig), "")
	}
}

// logReason is the end reason the log records for a connection ended by
// cause.
func logReason(cause error) string {
	var k kick
	var c closedError
	switch {
	case errors.As(cause, &k):
		return k.msg
	case errors.As(cause, &c):
		if c.err == nil || c.side == "client" {
			return connlog.EndClosed
		}
		return c.Error()
	case cause == nil || errors.Is(cause, context.Canceled):
		return connlog.EndClosed
	case errors.Is(cause, ErrServerClosed):
		return connlog.EndShutdown
	}
	return cause.Error()
}
