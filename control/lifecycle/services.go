package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
)

// Services are declared in the store and run by the sandbox's init.
// The rules: a declaration is accepted for a sandbox that has not ended;
// it is pushed to the init at once when the sandbox is ready, and the
// whole declared set is pushed every time the sandbox becomes ready
// (created or restored), before waiters hear it is ready. Restarting a
// service that exits, with backoff, is the init's job.

// ServiceSpec is a service declaration as clients send it.
type ServiceSpec = initproto.Service

// ServiceStatus is a declared service and what its init reports.
type ServiceStatus struct {
	store.Service
	// State is the init's (starting, running, exited, restarting), or
	// "stopped" while the sandbox is not running, or "unknown" when
	// the init could not be asked.
	State       string
	ExitCode    *int
	Starts      int
	LastStartAt *time.Time
	LastExitAt  *time.Time
}

// States a service has when its init cannot say.
const (
	ServiceStopped = "stopped"
	ServiceUnknown = "unknown"
)

// ErrUnknownService is returned for a service name a sandbox does not
// declare.
var ErrUnknownService = errors.New("service not found")

// UnknownServiceError is an ErrUnknownService naming the services the
// sandbox does declare, so the caller can correct the name at once.
type UnknownServiceError struct {
	Name     string
	Declared []string // sorted
}

func (e *UnknownServiceError) Error() string {
	if len(e.Declared) == 0 {
		return fmt.Sprintf("this sandbox declares no service named %q; it declares none", e.Name)
	}
	return fmt.Sprintf("this sandbox declares no service named %q; its services: %s", e.Name, strings.Join(e.Declared, ", "))
}

// Unwrap lets errors.Is(err, ErrUnknownService) match.
func (e *UnknownServiceError) Unwrap() error { return ErrUnknownService }

// UnknownService is the refusal of name among rows, the sandbox's
// declared services.
func UnknownService(name string, rows []store.Service) *UnknownServiceError {
	e := &UnknownServiceError{Name: name}
	for _, r := range rows {
		e.Declared = append(e.Declared, r.Name)
	}
	slices.Sort(e.Declared)
	return e
}

// Pods is the part of the pod connection pool that reaches a sandbox's
// SSH server, over which control calls the sandbox's init.
type Pods interface {
	Client(ctx context.Context, t podssh.Target) (*ssh.Client, error)
}

// initCallTimeout bounds one call to a sandbox's init.
const initCallTimeout = 15 * time.Second

// maxServices bounds the services one sandbox declares at creation.
const maxServices = 32

func validateServices(specs []ServiceSpec) error {
	if len(specs) > maxServices {
		return invalid("services", "at most %d services", maxServices)
	}
	seen := map[string]bool{}
	for i, sv := range specs {
		if err := sv.Validate(); err != nil {
			return invalid(fmt.Sprintf("services[%d]", i), "%v", err)
		}
		if seen[sv.Name] {
			return invalid(fmt.Sprintf("services[%d]", i), "name %q is declared twice", sv.Name)
		}
		seen[sv.Name] = true
	}
	return nil
}

func serviceRow(sandboxID string, sv ServiceSpec, now time.Time) store.Service {
	return store.Service{
		SandboxID: sandboxID, Name: sv.Name, Command: sv.Command, Args: sv.Args, Cwd: sv.Cwd,
		Env: sv.Env, Port: sv.Port, CreatedAt: now, UpdatedAt: now,
	}
}

func specOf(s store.Service) ServiceSpec {
	return ServiceSpec{Name: s.Name, Command: s.Command, Args: s.Args, Cwd: s.Cwd, Env: s.Env, Port: s.Port}
}

// PutService declares (or re-declares) a service of a sandbox that has
// not ended, and starts it now if the sandbox is ready.
func (m *Manager) PutService(ctx context.Context, acct store.Account, id string, sv ServiceSpec) (ServiceStatus, error) {
	if err := sv.Validate(); err != nil {
		return ServiceStatus{}, invalid("service", "%v", err)
	}
	if _, err := m.Get(ctx, acct, id); err != nil {
		return ServiceStatus{}, err
	}
	var row store.Service
	var sb store.Sandbox
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		var err error
		if sb, err = tx.SandboxForUpdate(ctx, id); err != nil {
			return err
		}
		if AdmissionOf(sb) == Ended {
			return &StateError{State: string(sb.State), Action: "declare a service of"}
		}
		row, err = tx.PutService(ctx, serviceRow(id, sv, m.now().UTC().Truncate(time.Microsecond)))
		return err
	})
	if err != nil {
		return ServiceStatus{}, fmt.Errorf("declare service %s of %s: %w", sv.Name, id, err)
	}
	st := ServiceStatus{Service: row, State: ServiceStopped}
	if sb.State != store.StateReady {
		return st, nil
	}
	statuses, err := m.callInit(ctx, sb, func(ctx context.Context, c initproto.Client) ([]initproto.Status, error) {
		return c.Put(ctx, sv)
	})
	if err != nil {
		m.log.WarnContext(ctx, "start service", "sandbox_id", id, "service", sv.Name, "err", err)
		st.State = ServiceUnknown
		return st, nil
	}
	return merge(row, statuses), nil
}

// DeleteService removes a declaration and stops the service.
func (m *Manager) DeleteService(ctx context.Context, acct store.Account, id, name string) error {
	sb, err := m.Get(ctx, acct, id)
	if err != nil {
		return err
	}
	err = m.store.InTx(ctx, func(tx store.Tx) error { return tx.DeleteService(ctx, id, name) })
	if errors.Is(err, store.ErrNotFound) {
		rows, lerr := m.store.Services(ctx, id)
		if lerr != nil {
			m.log.WarnContext(ctx, "list services for an unknown service's refusal", "sandbox_id", id, "err", lerr)
		}
		return UnknownService(name, rows)
	}
	if err != nil {
		return fmt.Errorf("delete service %s of %s: %w", name, id, err)
	}
	if sb.State != store.StateReady {
		return nil
	}
	_, err = m.callInit(ctx, sb, func(ctx context.Context, c initproto.Client) ([]initproto.Status, error) {
		return nil, c.Delete(ctx, name)
	})
	if err != nil && !errors.Is(err, initproto.ErrUnknownService) {
		m.log.WarnContext(ctx, "stop deleted service", "sandbox_id", id, "service", name, "err", err)
	}
	return nil
}

// Services lists a sandbox's declared services with their state.
func (m *Manager) Services(ctx context.Context, acct store.Account, id string) ([]ServiceStatus, error) {
	sb, err := m.Get(ctx, acct, id)
	if err != nil {
		return nil, err
	}
	rows, err := m.store.Services(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list services of %s: %w", id, err)
	}
	out := make([]ServiceStatus, len(rows))
	for i, r := range rows {
		out[i] = ServiceStatus{Service: r, State: ServiceStopped}
	}
	if sb.State != store.StateReady || len(rows) == 0 {
		return out, nil
	}
	statuses, err := m.callInit(ctx, sb, func(ctx context.Context, c initproto.Client) ([]initproto.Status, error) {
		return c.List(ctx)
	})
	if err != nil {
		m.log.WarnContext(ctx, "list services", "sandbox_id", id, "err", err)
		for i := range out {
			out[i].State = ServiceUnknown
		}
		return out, nil
	}
	for i, r := range rows {
		out[i] = merge(r, statuses)
	}
	return out, nil
}

// merge is row with what the init reports of it.
func merge(row store.Service, statuses []initproto.Status) ServiceStatus {
	st := ServiceStatus{Service: row, State: ServiceStopped}
	for _, s := range statuses {
		if s.Name == row.Name {
			st.State, st.ExitCode, st.Starts, st.LastStartAt, st.LastExitAt = s.State, s.ExitCode, s.Starts, s.LastStartAt, s.LastExitAt
		}
	}
	return st
}

// ServiceLogs sends the last tail lines of a service's output to emit.
// The sandbox must be ready: its init holds the output.
func (m *Manager) ServiceLogs(ctx context.Context, acct store.Account, id, name string, tail int, emit func(initproto.Line) error) error {
	c, err := m.logsInit(ctx, acct, id, name)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, initCallTimeout)
	lines, err := c.Logs(cctx, name, tail)
	cancel()
	if errors.Is(err, initproto.ErrUnknownService) {
		return nil // declared but not started (yet): no output to show
	}
	if err != nil {
		return err
	}
	for _, l := range lines {
		if err := emit(l); err != nil {
			return err
		}
	}
	return nil
}

// FollowServiceLogs is ServiceLogs that goes on with every new line
// until ctx ends. accepted is called once the sandbox's init has taken
// the follow, before any line, so that a caller can answer its client
// while the service is quiet; a service declared but not started ends
// the follow at once, without an error.
func (m *Manager) FollowServiceLogs(ctx context.Context, acct store.Account, id, name string, tail int, accepted func() error, emit func(initproto.Line) error) error {
	c, err := m.logsInit(ctx, acct, id, name)
	if err != nil {
		return err
	}
	err = c.Follow(ctx, name, tail, accepted, emit)
	if errors.Is(err, initproto.ErrUnknownService) {
		return nil
	}
	return err
}

// logsInit checks that name is a service of the caller's ready sandbox
// id and returns the client of the init that holds its output.
func (m *Manager) logsInit(ctx context.Context, acct store.Account, id, name string) (initproto.Client, error) {
	sb, err := m.Get(ctx, acct, id)
	if err != nil {
		return initproto.Client{}, err
	}
	rows, err := m.store.Services(ctx, id)
	if err != nil {
		return initproto.Client{}, fmt.Errorf("list services of %s: %w", id, err)
	}
	declared := false
	for _, r := range rows {
		declared = declared || r.Name == name
	}
	if !declared {
		return initproto.Client{}, UnknownService(name, rows)
	}
	if sb.State != store.StateReady {
		return initproto.Client{}, &StateError{State: string(sb.State), Action: "read service logs of"}
	}
	return m.initClient(ctx, sb)
}

// startServices pushes the declared set to the init of sb, which the
// provider has just started (or restored) at ep; it runs before the
// sandbox is marked ready, so whoever waits for ready finds its services
// starting. booted is the set the provider was handed (Spec.Services;
// nil if none): when the provider says it started exactly that
// (ep.ServicesStarted) and it is still the declared set, there is
// nothing to push and the SSH round trip is skipped. A declaration
// changed since booted was read is pushed as ever. Failures are logged,
// never fatal: the sandbox is usable without its services, and the next
// restore pushes again.
func (m *Manager) startServices(ctx context.Context, sb store.Sandbox, ep provider.Endpoint, hostKey string, booted []ServiceSpec) {
	specs, err := m.declaredSpecs(ctx, sb.ID)
	if err != nil {
		m.log.WarnContext(ctx, "start services: list", "sandbox_id", sb.ID, "err", err)
		return
	}
	if len(specs) == 0 {
		return
	}
	if ep.ServicesStarted && sameSpecs(specs, booted) {
		m.log.InfoContext(ctx, "services started by the provider", "sandbox_id", sb.ID, "services", len(specs))
		return
	}
	sb.Endpoint, sb.SSHUser, sb.Workspace, sb.HostKey = ep.Addr, ep.User, ep.Workspace, hostKey
	sb.ForwardEndpoint = ep.ForwardAddr
	if _, err := m.callInit(ctx, sb, func(ctx context.Context, c initproto.Client) ([]initproto.Status, error) {
		return c.Sync(ctx, specs)
	}); err != nil {
		m.log.WarnContext(ctx, "start services", "sandbox_id", sb.ID, "err", err)
		return
	}
	m.log.InfoContext(ctx, "services started", "sandbox_id", sb.ID, "services", len(specs))
}

// sameSpecs says whether a and b declare the same services in the same
// order (both are read from the store, which lists them by name).
func sameSpecs(a, b []ServiceSpec) bool {
	return slices.EqualFunc(a, b, ServiceSpec.Same)
}

// bootServices is the declared set of sb for the provider to start with
// the sandbox (provider.Spec.Services), so that its services do not wait
// for startServices' SSH round trip; startServices, run after, skips the
// push if the provider started them and the set did not change. A
// failed read leaves them to startServices.
func (m *Manager) bootServices(ctx context.Context, id string) []ServiceSpec {
	specs, err := m.declaredSpecs(ctx, id)
	if err != nil {
		m.log.WarnContext(ctx, "services for the provider", "sandbox_id", id, "err", err)
	}
	return specs
}

func (m *Manager) declaredSpecs(ctx context.Context, id string) ([]ServiceSpec, error) {
	rows, err := m.store.Services(ctx, id)
	if err != nil {
		return nil, err
	}
	specs := make([]ServiceSpec, len(rows))
	for i, r := range rows {
		specs[i] = specOf(r)
	}
	return specs, nil
}

func (m *Manager) initClient(ctx context.Context, sb store.Sandbox) (initproto.Client, error) {
	if m.pods == nil {
		return initproto.Client{}, errors.New("lifecycle: no connection pool to reach the sandbox's init")
	}
	c, err := m.pods.Client(ctx, podssh.Target{
		SandboxID: sb.ID, Addr: sb.Endpoint, User: sb.SSHUser, HostKey: sb.HostKey, Workspace: sb.Workspace,
	})
	if err != nil {
		return initproto.Client{}, fmt.Errorf("reach sandbox %s: %w", sb.ID, err)
	}
	return initproto.Client{SSH: c}, nil
}

func (m *Manager) callInit(ctx context.Context, sb store.Sandbox, call func(context.Context, initproto.Client) ([]initproto.Status, error)) ([]initproto.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, initCallTimeout)
	defer cancel()
	c, err := m.initClient(ctx, sb)
	if err != nil {
		return nil, err
	}
	return call(ctx, c)
}
