package lifecycle

import (
	"regexp"

	"github.com/sbxedge/sbx/control/store"
)

// Consumer actors.
const (
	ActorHuman      = "human"
	ActorAgent      = "agent"
	ActorAutomation = "automation"
)

// consumerValueRE bounds the caller's correlation IDs: printable ASCII, so
// they are safe in logs, metrics exports and headers.
var consumerValueRE = regexp.MustCompile(`^[\x20-\x7e]{1,200}$`)

// validateConsumer checks the optional consumer block of a create.
func validateConsumer(c *store.Consumer) (store.Consumer, error) {
	if c == nil {
		return store.Consumer{}, nil
	}
	switch c.Actor {
	case ActorHuman, ActorAgent, ActorAutomation:
	case "":
		return store.Consumer{}, invalid("consumer.actor", "is required when consumer is given (human, agent or automation)")
	default:
		return store.Consumer{}, invalid("consumer.actor", "must be human, agent or automation, not %q", c.Actor)
	}
	for _, f := range []struct{ name, v string }{
		{"consumer.project", c.Project}, {"consumer.session_id", c.SessionID}, {"consumer.run_id", c.RunID},
	} {
		if f.v != "" && !consumerValueRE.MatchString(f.v) {
			return store.Consumer{}, invalid(f.name, "must be 1 to 200 printable ASCII characters")
		}
	}
	return *c, nil
}
