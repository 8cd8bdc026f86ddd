package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

func (s *server) uploadLVS(w http.ResponseWriter, r *http.Request) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	v := mux.Vars(r)
	etag, err := s.svc.UploadLVS(r.Context(), v["amphora_id"], v["listener_id"], body)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag)
	writeJSON(w, http.StatusOK, ok())
	return nil
}

func (s *server) getLVS(w http.ResponseWriter, r *http.Request) error {
	data, err := s.svc.LVSConfig(r.Context(), mux.Vars(r)["listener_id"])
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	w.Write(data)
	return nil
}
