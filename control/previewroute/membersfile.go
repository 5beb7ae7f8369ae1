package previewroute

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxedge/sbx/internal/tick"
)

// MembersWatchInterval is how often a MembersFile is read again by
// Watch: removing someone from the file takes effect (and ends their open
// preview connections) within about this long.
const MembersWatchInterval = time.Second

// MembersFile is the operator's members file, reloaded when it changes.
// Reading the whole (small) file and comparing it, rather than watching
// for file events, also sees a Kubernetes ConfigMap's symlink swap.
// Safe for concurrent use.
type MembersFile struct {
	path    string
	members atomic.Pointer[Members]

	mu   sync.Mutex // guards last
	last []byte     // the content members was built from
}

// OpenMembersFile loads path; a file that does not parse is an error
// here, and later (in Reload) keeps the members loaded before.
func OpenMembersFile(path string) (*MembersFile, error) {
	f := &MembersFile{path: path}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Member reports whether id belongs to accountID under the file's
// current content. A nil MembersFile admits nobody.
func (f *MembersFile) Member(id Identity, accountID string) bool {
	if f == nil {
		return false
	}
	return f.members.Load().Member(id, accountID)
}

// Reload reads the file again and reports whether its content changed.
// On an error the members loaded before stay in force.
func (f *MembersFile) Reload() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if err != nil {
		return false, err
	}
	if f.members.Load() != nil && bytes.Equal(b, f.last) {
		return false, nil
	}
	m, err := parseMembers(f.path, b)
	if err != nil {
		return false, err
	}
	f.members.Store(m)
	f.last = b
	return true, nil
}

// Watch reloads the file every interval until ctx ends, calling changed
// after each reload that changed it. It runs in the caller's goroutine.
func (f *MembersFile) Watch(ctx context.Context, interval time.Duration, log *slog.Logger, changed func()) {
	tick.Every(ctx, interval, func() bool {
		ok, err := f.Reload()
		if err != nil {
			log.Warn("reload preview members; keeping the previous ones", "path", f.path, "err", err)
			return true
		}
		if ok {
			log.Info("preview members reloaded", "path", f.path)
			changed()
		}
		return true
	})
}
