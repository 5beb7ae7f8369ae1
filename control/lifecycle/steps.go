package lifecycle

import (
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// provisionSteps times a provisioning by step, for the ready event's
// message: where create→ready goes (queue wait, spec, provision, clone,
// services), so a slow create names its slow step without a profiler.
type provisionSteps struct {
	created time.Time // the sandbox's admission
	last    time.Time
	parts   []string
}

// newProvisionSteps starts at the job's fetch: its queue wait is from the
// sandbox's admission (when the job was enqueued, in the same
// transaction) to River's fetch of this attempt.
func newProvisionSteps(created time.Time, job *rivertype.JobRow, now time.Time) *provisionSteps {
	s := &provisionSteps{created: created, last: now}
	if job != nil && job.AttemptedAt != nil && job.Attempt <= 1 {
		s.parts = append(s.parts, "queue_wait="+ms(job.AttemptedAt.Sub(created)))
		s.last = *job.AttemptedAt
	}
	return s
}

// mark ends the step named name at now.
func (s *provisionSteps) mark(name string, now time.Time) {
	s.parts = append(s.parts, name+"="+ms(now.Sub(s.last)))
	s.last = now
}

// message is the split, and the whole from admission to now.
func (s *provisionSteps) message(now time.Time) string {
	return fmt.Sprintf("steps: %s total=%s", strings.Join(s.parts, " "), ms(now.Sub(s.created)))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}
