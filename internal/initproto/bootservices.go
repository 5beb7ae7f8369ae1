package initproto

import (
	"encoding/json"
	"fmt"
)

// ServicesFile is the key of the sandbox's declared services in the
// mounted Secret (and the name of the file the local provider keeps
// them in): a JSON array of Service (provider.Spec.Services). The init
// starts them once, when it first installs the Secret (the pod's start,
// or a warm pod's claim), so they do not wait for control's push; from
// then on control's calls (Sync, Put, Delete) are the authority, and a
// later change of the Secret leaves the running set alone.
const ServicesFile = "services.json"

// EncodeServices is svcs as a ServicesFile, each checked first; nil
// encodes as an empty array.
func EncodeServices(svcs []Service) ([]byte, error) {
	for _, sv := range svcs {
		if err := sv.Validate(); err != nil {
			return nil, fmt.Errorf("service %q: %w", sv.Name, err)
		}
	}
	if svcs == nil {
		svcs = []Service{}
	}
	return json.Marshal(svcs)
}

// ParseServices decodes and checks a ServicesFile.
func ParseServices(b []byte) ([]Service, error) {
	var svcs []Service
	if err := json.Unmarshal(b, &svcs); err != nil {
		// Not json's message: a syntax error quotes a byte of the input,
		// and a service's env may hold a secret.
		return nil, fmt.Errorf("%s: not a JSON array of services", ServicesFile)
	}
	for _, sv := range svcs {
		if err := sv.Validate(); err != nil {
			return nil, fmt.Errorf("%s: service %q: %w", ServicesFile, sv.Name, err)
		}
	}
	return svcs, nil
}
