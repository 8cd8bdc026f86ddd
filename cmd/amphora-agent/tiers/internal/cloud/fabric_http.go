package cloud

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// The drivers' wire: POST /<service>/<method> with a JSON object of the
// Python call's arguments; 200 with the JSON answer, 404 for errNotFound,
// 501 for errNotModelled, 400 for anything else, each with {"error": ...}.

type handler func(f *Fabric, body json.RawMessage) (any, error)

var handlers = map[string]handler{
	"compute/build":                      unlocked((*Fabric).build),
	"compute/delete":                     unlocked((*Fabric).deleteServer),
	"compute/status":                     locked((*Fabric).status),
	"compute/get_amphora":                locked((*Fabric).getAmphora),
	"compute/create_server_group":        locked((*Fabric).createServerGroup),
	"compute/delete_server_group":        locked((*Fabric).deleteServerGroup),
	"compute/validate_flavor":            locked(accept),
	"compute/validate_availability_zone": locked(accept),
	"network/get_network":                locked((*Fabric).getNetwork),
	"network/get_subnet":                 locked((*Fabric).getSubnet),
	"network/get_port":                   locked((*Fabric).getPort),
	"network/allocate_vip":               locked((*Fabric).allocateVIP),
	"network/deallocate_vip":             locked((*Fabric).deallocateVIP),
	"network/plug_aap_port":              unlocked((*Fabric).plugAAPPort),
	"network/unplug_aap_port":            locked((*Fabric).unplugAAPPort),
	"network/get_plugged_networks":       locked((*Fabric).pluggedNetworks),
	"compute/attach_network_or_port":     unlocked((*Fabric).attach),
	"compute/detach_port":                unlocked((*Fabric).detachPort),
	"network/unplug_network":             unlocked((*Fabric).unplugNetwork),
	"network/plug_fixed_ip":              locked((*Fabric).plugFixedIP),
	"network/unplug_fixed_ip":            locked((*Fabric).unplugFixedIP),
	"network/delete_port":                locked((*Fabric).deletePort),
}

// locked decodes a call's arguments into A and runs fn holding the
// fabric's lock.
func locked[A any](fn func(*Fabric, A) (any, error)) handler {
	return func(f *Fabric, body json.RawMessage) (any, error) {
		var a A
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return fn(f, a)
	}
}

// unlocked is locked for handlers that call the hypervisor, which must
// not run under the lock.
func unlocked[A any](fn func(*Fabric, A) (any, error)) handler {
	return func(f *Fabric, body json.RawMessage) (any, error) {
		var a A
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return fn(f, a)
	}
}

// accept answers calls that only need to succeed (flavors and zones are
// recorded by the call log, never refused).
func accept(*Fabric, idArgs) (any, error) { return map[string]any{}, nil }

// Serve answers the drivers on a unix socket at path until l is closed.
func (f *Fabric) Serve(l net.Listener) error {
	return http.Serve(l, http.HandlerFunc(f.serveHTTP))
}

func (f *Fabric) serveHTTP(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/")
	f.record(method)
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, fmt.Errorf("%s: decoding the arguments: %v", method, err))
		return
	}
	h, ok := handlers[method]
	if !ok {
		writeError(w, fmt.Errorf("%s: %w", method, errNotModelled))
		return
	}
	answer, err := h(f, body)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	switch {
	case errors.Is(err, errNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errNotModelled):
		code = http.StatusNotImplemented
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

type idArgs struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
