package api

import "testing"

func TestLVSRoutes(t *testing.T) {
	const text = "text/plain; charset=UTF-8"
	const js = "application/json"
	cases := []routeCase{
		{"PUT", "/1.0/listeners/amp1/l1/udp_listener", "net_namespace x", 200, `{"message":"OK"}`, "etag-l1", js, []string{"lvs-upload amp1 l1 net_namespace x"}},
		{"GET", "/1.0/listeners/l1/udp_listener", "", 200, "virtual_server_group ipv4-group {\n", "", text, []string{"lvs-config l1"}},
		{"GET", "/1.0/listeners/missing/udp_listener", "", 404,
			`{"message":"UDP Listener Not Found","details":"No UDP listener with UUID: missing"}`, "", js, []string{"lvs-config missing"}},
		// The shared routes go to the agent, which dispatches.
		{"PUT", "/1.0/loadbalancer/l1/reload", "", 202, `{"message":"OK","details":"Listener l1 reloaded"}`, "", js, []string{"action l1 reload"}},
		{"DELETE", "/1.0/listeners/l1", "", 200, `{"message":"OK"}`, "", js, []string{"delete l1"}},
		{"PUT", "/1.0/listeners/l1/udp_listener", "", 405, methodBody, "", js, nil},
		{"DELETE", "/1.0/listeners/amp1/l1/udp_listener", "", 405, methodBody, "", js, nil},
	}
	for _, c := range cases {
		checkRoute(t, c)
	}
}
