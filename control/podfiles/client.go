// Package podfiles is the sandbox side of control's files API: single
// files and folders (as tar archives) read and written over SFTP on the
// pooled connection podssh keeps to each sandbox, with every path checked
// to stay inside the workspace. It is apart from podssh so that the edge,
// which reaches sandboxes through podssh but never touches their files,
// links neither the SFTP client nor archive/tar.
package podfiles

import (
	"context"
	"fmt"
	"io"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/podssh"
)

// Conns is what Client needs of the pool: *podssh.Pool.
type Conns interface {
	Attached(ctx context.Context, t podssh.Target, key any, open func(context.Context, *ssh.Client) (io.Closer, error)) (io.Closer, error)
}

// sftpKey names the SFTP client kept on a pooled connection.
type sftpKey struct{}

// Client returns the SFTP client kept on t's pooled connection, opening
// it the first time. It is closed with the connection; callers do not
// close it.
func Client(ctx context.Context, pool Conns, t podssh.Target) (*sftp.Client, error) {
	v, err := pool.Attached(ctx, t, sftpKey{}, openSFTP)
	if err != nil {
		return nil, err
	}
	return v.(*sftp.Client), nil
}

// openSFTP opens an SFTP client on client. sftp.NewClient's session open
// can hang as an exec session's can, so it runs through podssh.OpenAside.
func openSFTP(ctx context.Context, client *ssh.Client) (io.Closer, error) {
	// Concurrent reads/writes keep several 32 KiB packets in flight, which
	// is what makes large transfers fast over a high-latency link.
	open := func() (*sftp.Client, error) {
		return sftp.NewClient(client, sftp.UseConcurrentWrites(true), sftp.UseConcurrentReads(true))
	}
	c, err := podssh.OpenAside(ctx, client, open, func(c *sftp.Client) { c.Close() })
	if err != nil {
		return nil, fmt.Errorf("open sftp: %w", err)
	}
	return c, nil
}
