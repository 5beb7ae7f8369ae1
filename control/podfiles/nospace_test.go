package podfiles_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/pkg/sftp"

	"github.com/sbxedge/sbx/control/podfiles"
)

// fullDisk is an in-memory SFTP file system whose writes fail with err,
// and whose statvfs reports avail free blocks.
type fullDisk struct {
	sftp.Handlers
	err   error
	avail uint64
}

type failingWriter struct{ err error }

func (w failingWriter) WriteAt([]byte, int64) (int, error) { return 0, w.err }

func (d *fullDisk) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	if _, err := d.Handlers.FilePut.Filewrite(r); err != nil {
		return nil, err
	}
	return failingWriter{d.err}, nil
}

type statVFSCmd struct {
	sftp.FileCmder
	avail uint64
}

func (c statVFSCmd) StatVFS(*sftp.Request) (*sftp.StatVFS, error) {
	return &sftp.StatVFS{Bsize: 4096, Frsize: 4096, Blocks: 256, Bfree: c.avail, Bavail: c.avail, Files: 10, Ffree: 5, Favail: 5, Namemax: 255}, nil
}

// serveFullDisk connects an SFTP client to an in-process server of d.
func serveFullDisk(t *testing.T, d *fullDisk) *sftp.Client {
	t.Helper()
	a, b := net.Pipe()
	h := sftp.Handlers{FileGet: d.Handlers.FileGet, FilePut: d, FileCmd: statVFSCmd{d.Handlers.FileCmd, d.avail}, FileList: d.Handlers.FileList}
	srv := sftp.NewRequestServer(a, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve() }()
	c, err := sftp.NewClientPipe(b, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Close(); <-done })
	return c
}

// TestPutDiskFull (issue 27 L5): a write the disk has no room for is
// ErrNoSpace, whether the server says why (pkg/sftp passes the errno's
// text: ENOSPC, EDQUOT, EFBIG) or only "Failure" as OpenSSH does, when
// the file system then reports no block free; a failure on a disk with
// room is not.
func TestPutDiskFull(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		err   error
		avail uint64
		want  bool
	}{
		{"ENOSPC", &os.PathError{Op: "write", Path: "/w/f", Err: syscall.ENOSPC}, 100, true},
		{"EDQUOT", &os.PathError{Op: "write", Path: "/w/f", Err: syscall.EDQUOT}, 100, true},
		{"EFBIG", &os.PathError{Op: "write", Path: "/w/f", Err: syscall.EFBIG}, 100, true},
		{"bare failure, no block free", errors.New("Failure"), 0, true},
		{"bare failure, room left", errors.New("Failure"), 100, false},
		{"another error", &os.PathError{Op: "write", Path: "/w/f", Err: syscall.EIO}, 100, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := serveFullDisk(t, &fullDisk{Handlers: sftp.InMemHandler(), err: c.err, avail: c.avail})
			_, err := podfiles.Put(ctx, cl, "/w/f", strings.NewReader("some bytes"), 0)
			if err == nil {
				t.Fatal("Put succeeded on a failing disk")
			}
			if got := errors.Is(err, podfiles.ErrNoSpace); got != c.want {
				t.Fatalf("Put = %v; ErrNoSpace %v, want %v", err, got, c.want)
			}
		})
	}
}
