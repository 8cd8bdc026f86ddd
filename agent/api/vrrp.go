package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

func (s *server) uploadVRRP(w http.ResponseWriter, r *http.Request) error {
	return s.store(w, r, http.StatusOK, s.svc.UploadVRRP)
}

func (s *server) vrrpAction(w http.ResponseWriter, r *http.Request) error {
	details, err := s.svc.VRRPAction(r.Context(), mux.Vars(r)["action"])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, okDetails(details))
	return nil
}
