package previewroute

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Identity is a person signed in through OIDC.
type Identity struct {
	Issuer        string
	Subject       string
	Email         string
	EmailVerified bool
}

// Membership grants one identity access to one account's private
// previews. Either Issuer and Subject are set (the stable OIDC identity),
// or Email (matched only when the provider says it is verified).
type Membership struct {
	AccountID string `json:"account_id"`
	Issuer    string `json:"issuer,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Email     string `json:"email,omitempty"`
}

// Members is the operator-managed list of who belongs to which account,
// read from a JSON file (a list of Membership) so operators grant and
// revoke access with their config management, without touching the
// database. It is immutable; load a new one to change it.
type Members struct {
	bySubject map[[2]string]map[string]bool // (issuer, subject) -> accounts
	byEmail   map[string]map[string]bool    // lowercased email -> accounts
}

// NewMembers indexes ms, rejecting entries that name no identity.
func NewMembers(ms []Membership) (*Members, error) {
	m := &Members{bySubject: map[[2]string]map[string]bool{}, byEmail: map[string]map[string]bool{}}
	add := func(idx map[string]bool, acct string) map[string]bool {
		if idx == nil {
			idx = map[string]bool{}
		}
		idx[acct] = true
		return idx
	}
	for i, e := range ms {
		switch {
		case e.AccountID == "":
			return nil, fmt.Errorf("membership %d: account_id is required", i)
		case e.Issuer != "" && e.Subject != "" && e.Email == "":
			k := [2]string{e.Issuer, e.Subject}
			m.bySubject[k] = add(m.bySubject[k], e.AccountID)
		case e.Email != "" && e.Issuer == "" && e.Subject == "":
			k := strings.ToLower(e.Email)
			m.byEmail[k] = add(m.byEmail[k], e.AccountID)
		default:
			return nil, fmt.Errorf("membership %d (account %s): set issuer and subject, or email alone", i, e.AccountID)
		}
	}
	return m, nil
}

// LoadMembers reads a JSON list of Membership from path.
func LoadMembers(path string) (*Members, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read preview members: %w", err)
	}
	return parseMembers(path, b)
}

func parseMembers(path string, b []byte) (*Members, error) {
	var ms []Membership
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("parse preview members %s: %w", path, err)
	}
	m, err := NewMembers(ms)
	if err != nil {
		return nil, fmt.Errorf("preview members %s: %w", path, err)
	}
	return m, nil
}

// Member reports whether id belongs to accountID. A nil Members admits
// nobody.
func (m *Members) Member(id Identity, accountID string) bool {
	if m == nil {
		return false
	}
	if id.Issuer != "" && id.Subject != "" && m.bySubject[[2]string{id.Issuer, id.Subject}][accountID] {
		return true
	}
	// An unverified email proves nothing: anyone can type one at some
	// providers.
	return id.EmailVerified && id.Email != "" && m.byEmail[strings.ToLower(id.Email)][accountID]
}
