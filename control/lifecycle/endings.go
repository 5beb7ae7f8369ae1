package lifecycle

import (
	"context"
	"sync"
	"time"
)

// endings holds the sandboxes this process is ending whose state change
// the edges have not yet been told of (Manager.publish). A sandbox's
// teardown waits for that word: torn down first, its SSH server would
// close the broker's open sessions before the broker's re-check (a
// control round trip after the invalidation) could tell them why, and
// they would end as "closed by remote host" rather than "sandbox ... has
// ended" (TestSSHSessionToldSandboxEnded). With the job queue woken on
// commit, the teardown starts within milliseconds of the end's commit,
// well inside that round trip.
//
// In one process (sbx dev) publish returns once the edge has applied the
// invalidation. Across replicas it returns once Redis took it, and the
// teardown of another replica's end does not wait here: a pod's deletion
// takes longer than an edge's re-check. The zero value is ready.
type endings struct {
	mu sync.Mutex
	m  map[string]*ending
}

type ending struct {
	n    int // ends of the sandbox in progress
	done chan struct{}
}

// tellWait bounds a teardown's wait for the word: publish is bounded by
// the broker's re-check timeout (5 s); a teardown must not hang on it.
const tellWait = 10 * time.Second

// begin records an end of id in progress; the returned func records it
// told (or abandoned) and must be called once.
func (e *endings) begin(id string) func() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]*ending{}
	}
	en := e.m[id]
	if en == nil {
		en = &ending{done: make(chan struct{})}
		e.m[id] = en
	}
	en.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if en.n--; en.n == 0 {
				close(en.done)
				delete(e.m, id)
			}
		})
	}
}

// wait returns once no end of id is in progress in this process, or ctx
// ends, or tellWait passed.
func (e *endings) wait(ctx context.Context, id string) {
	e.mu.Lock()
	en := e.m[id]
	e.mu.Unlock()
	if en == nil {
		return
	}
	t := time.NewTimer(tellWait)
	defer t.Stop()
	select {
	case <-en.done:
	case <-ctx.Done():
	case <-t.C:
	}
}
