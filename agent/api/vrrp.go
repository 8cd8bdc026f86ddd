package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

func (s *server) uploadVRRP(w http.ResponseWriter, r *http.Request) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	etag, err := s.svc.UploadVRRP(r.Context(), body)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, ok())
	return nil
}

func (s *server) vrrpAction(w http.ResponseWriter, r *http.Request) error {
	details, err := s.svc.VRRPAction(r.Context(), mux.Vars(r)["action"])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, okDetails(details))
	return nil
}
