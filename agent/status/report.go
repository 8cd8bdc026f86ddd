package status

import "time"

// Schema is the version of the JSON document; fields are only ever added
// within one schema.
const Schema = 1

// Report is the whole status; its JSON form is the stable `--json` document.
type Report struct {
	Schema        int            `json:"schema"`
	GeneratedAt   time.Time      `json:"generated_at"`
	Agent         Agent          `json:"agent"`
	LoadBalancers []LoadBalancer `json:"load_balancers"`
	// VRRP is null when no keepalived (ACTIVE_STANDBY) config was uploaded.
	VRRP         *VRRP         `json:"vrrp"`
	LVSListeners []LVSListener `json:"lvs_listeners"`
	Network      Network       `json:"network"`
	Heartbeat    Heartbeat     `json:"heartbeat"`
	// Unknown lists what could not be found out, and why.
	Unknown []string `json:"unknown"`
	// Health is the verdict `status` exits with (see Assess).
	Health Health `json:"health"`
}

// Health sums the report up for a script: is everything that should run
// running?
type Health struct {
	// State is HealthOK, HealthDegraded, HealthNotRunning or HealthUnknown.
	State string `json:"state"`
	// Problems says what is wrong, one line each; empty when OK.
	Problems []string `json:"problems"`
}

// The health states, from best to worst for a script: the agent runs and
// everything wanted runs; the agent runs (or hangs) but something wanted
// does not; the agent is not running; it could not be asked at all.
const (
	HealthOK         = "ok"
	HealthDegraded   = "degraded"
	HealthNotRunning = "not_running"
	HealthUnknown    = "unknown"
)

// Agent is the agent process and its configuration.
type Agent struct {
	// Running is true when the running agent answered on its status socket;
	// the fields marked "live" are only filled then.
	Running bool `json:"running"`
	// State is AgentRunning, AgentNotRunning or AgentUnknown (it could not
	// be asked); StateReason says why when it is not running or unknown.
	State       string    `json:"state"`
	StateReason string    `json:"state_reason,omitempty"`
	Socket      string    `json:"socket"`
	Pid         int       `json:"pid,omitempty"`       // live
	Version     string    `json:"version"`             // the agent's when live, else this binary's
	StartedAt   time.Time `json:"started_at,omitzero"` // live
	ConfigFiles []string  `json:"config_files"`
	APIAddress  string    `json:"api_address"`
	Topology    string    `json:"topology"`
	Namespace   string    `json:"namespace"`
	BasePath    string    `json:"base_path"`
	// Ready: the start-up restore is over and the API serves (live).
	Ready bool `json:"ready"`
	// Log says where the agent's own log goes (live).
	Log string `json:"log,omitempty"`
	// Goroutines is how many the agent runs (live).
	Goroutines int `json:"goroutines,omitempty"`
}

// The agent's states.
const (
	// AgentRunning: it answered on its status socket.
	AgentRunning = "running"
	// AgentNotRunning: there is no socket, or nothing listens on it.
	AgentNotRunning = "not_running"
	// AgentUnknown: it could not be asked (no permission to, or no
	// answer in time).
	AgentUnknown = "unknown"
)

// Process is one supervised daemon as the files and /proc show it, with
// what the running agent adds.
type Process struct {
	// Desired is "running", "stopped" or "unknown" (nothing recorded).
	Desired   string    `json:"desired"`
	Running   bool      `json:"running"`
	Pid       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// Respawns counts unexpected deaths followed by a restart since the
	// agent started; null without the running agent.
	Respawns   *int      `json:"respawns"`
	LastExit   string    `json:"last_exit,omitempty"`
	LastExitAt time.Time `json:"last_exit_at,omitzero"`
	// Log is the file holding the daemon's stdout and stderr.
	Log string `json:"log"`
	// Journal are the identifiers (journalctl -t) under which the
	// daemon's output is in the journal; empty without a journal.
	Journal []string `json:"journal"`
}

// LoadBalancer is one HAProxy load balancer.
type LoadBalancer struct {
	ID string `json:"id"`
	Process
	Workers   []int      `json:"workers"`
	Listeners []Listener `json:"listeners"`
	// LastReload is null when no reload ran since the agent started (or
	// without the running agent).
	LastReload *Reload `json:"last_reload"`
	// FailedConfig is null when no refused config is kept.
	FailedConfig *FailedConfig `json:"failed_config"`
}

// Listener is one frontend and its status as HAProxy reports it.
type Listener struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// Reload is the result of the last reload the agent ran.
type Reload struct {
	At     time.Time `json:"at"`
	OK     bool      `json:"ok"`
	Result string    `json:"result"`
}

// FailedConfig is a config HAProxy refused, kept beside the stored one.
type FailedConfig struct {
	Path string    `json:"path"`
	At   time.Time `json:"at"`
	// Why is the refusal the running agent remembers; empty otherwise.
	Why string `json:"why,omitempty"`
}

// VRRP is the ACTIVE_STANDBY keepalived.
type VRRP struct {
	Process
	// Role is the VRRP state keepalived last logged for its instance
	// (MASTER, BACKUP, FAULT), "" when its log does not say.
	Role string `json:"role"`
	// VIPs are the configured virtual addresses this amphora holds now.
	VIPs []string `json:"vips"`
	// ConfiguredVIPs are all the virtual addresses of the config.
	ConfiguredVIPs []string `json:"configured_vips"`
}

// LVSListener is one UDP or SCTP listener's keepalived.
type LVSListener struct {
	ID string `json:"id"`
	Process
	Status string `json:"status"` // ACTIVE, OFFLINE or ERROR, as GET /1.0/listeners
}

// Network is the data-plane namespace and the plugged interfaces.
type Network struct {
	Namespace  string      `json:"namespace"`
	Present    bool        `json:"present"`
	Interfaces []Interface `json:"interfaces"`
}

// Interface is one plugged NIC, as recorded, and whether the namespace has
// it.
type Interface struct {
	Name      string   `json:"name"`
	MAC       string   `json:"mac"`
	Present   bool     `json:"present"`
	Addresses []string `json:"addresses"`
}

// Heartbeat is the heartbeat sender's state (live, except the
// configuration).
type Heartbeat struct {
	Destinations []string  `json:"destinations"`
	IntervalSec  float64   `json:"interval_seconds"`
	LastSendAt   time.Time `json:"last_send_at,omitzero"`
	Destination  string    `json:"last_destination,omitempty"`
	// LastResult is "sent", or why the last cycle sent nothing.
	LastResult string `json:"last_result,omitempty"`
	Seq        uint64 `json:"seq,omitempty"`
	// Suppressed says why heartbeats are withheld now, "" when they are not.
	Suppressed string `json:"suppressed,omitempty"`
}
