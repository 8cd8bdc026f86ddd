package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/netns"
)

// noInterfaceBody is upstream's 404 for a NIC that has not appeared yet:
// only "details", whose text makes the controller retry the plug.
type noInterfaceBody struct {
	Details string `json:"details"`
}

// plugged answers a plug: 202 with the details text, or the special 404.
func (s *server) plugged(w http.ResponseWriter, r *http.Request, details string, err error) error {
	if errors.Is(err, netns.ErrNoInterface) {
		s.log.Info("request refused", zap.String("method", r.Method), zap.String("path", r.URL.Path),
			zap.Int("status", http.StatusNotFound), zap.Error(err))
		writeJSON(w, http.StatusNotFound, noInterfaceBody{Details: netns.ErrNoInterface.Message})
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, okDetails(details))
	return nil
}

func (s *server) plugVIP(w http.ResponseWriter, r *http.Request) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	details, err := s.svc.PlugVIP(r.Context(), mux.Vars(r)["vip"], body)
	return s.plugged(w, r, details, err)
}

func (s *server) plugNetwork(w http.ResponseWriter, r *http.Request) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	details, err := s.svc.PlugNetwork(r.Context(), body)
	return s.plugged(w, r, details, err)
}

type interfaceBody struct {
	Message   string `json:"message"`
	Interface string `json:"interface"`
}

func (s *server) getInterface(w http.ResponseWriter, r *http.Request) error {
	name, err := s.svc.InterfaceFor(r.Context(), mux.Vars(r)["ip"])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, interfaceBody{Message: "OK", Interface: name})
	return nil
}

func (s *server) setInterfaceRules(w http.ResponseWriter, r *http.Request) error {
	ip := mux.Vars(r)["ip"]
	return s.apply(w, r, http.StatusOK, func(ctx context.Context, body []byte) error {
		return s.svc.SetInterfaceRules(ctx, ip, body)
	})
}
