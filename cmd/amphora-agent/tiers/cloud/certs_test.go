//go:build cloud

package cloud_test

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
)

// amphoraClockLag is how far the clocks of TestCloudScenarios' amphorae
// lag the controller's: every certificate the controller issues is then
// not valid yet by the amphora's clock when it arrives.
const amphoraClockLag = 10 * time.Minute

// minClockLag is the least lag measured in the VM that still tests a
// lagging amphora (the guest's clock may gain a little while it boots).
const minClockLag = 5 * time.Minute

// rotationOverride makes every amphora's certificate due for the
// housekeeping process it is given to: a buffer longer than the 30 days
// Octavia's local generator issues certificates for ([certificates]
// cert_validity_time), and a check interval longer than the test, so the
// check made at start-up is the only one.
const rotationOverride = "[house_keeping]\ncert_expiry_buffer = 3456000\ncert_interval = 86400\n"

// What housekeeping's log says of its rotation flows: how many it
// started, and each one's end.
var (
	rotatedCount  = regexp.MustCompile(`Rotated certificates for (\d+) amphora`)
	rotationEnded = regexp.MustCompile(`Flow 'octavia-cert-rotate-amphora-flow' \([^)]*\) transitioned into state '(SUCCESS|REVERTED|FAILURE)'`)
)

// ampCert is one amphora's certificate as the database and its agent show
// it, and the agent's process.
type ampCert struct {
	id, computeID, ip string
	dbExpiry          time.Time // amphora.cert_expiration
	serial            *big.Int  // of the certificate the agent presents on 9443
	notAfter          time.Time
	pid               string // the agent's MainPID in the VM
}

// certRotation: housekeeping, restarted with a config that makes every
// amphora's certificate due, rotates each one through its agent (PUT
// /certificate); the database records the new expiry, the agent presents
// the new certificate on its next handshake without restarting, a later
// listener update reaches it, and housekeeping gets its own config back.
// The amphorae's clocks lag the controller's (amphoraClockLag), so each
// new certificate is not valid yet by the amphora's clock: the agent
// takes it with a warning.
func (s *scene) certRotation(t *testing.T) {
	defer s.logVMState(t)
	start := time.Now()
	// A rotation racing a create flow would upload to an amphora still
	// booting; the second load balancer may still be on its way.
	cloud.WaitFor(t, 20*time.Minute, "no load balancer pending and every amphora ALLOCATED", func() bool {
		out, err := s.cp.SQL("SELECT (SELECT COUNT(*) FROM load_balancer WHERE provisioning_status LIKE 'PENDING%') + " +
			"(SELECT COUNT(*) FROM amphora WHERE status NOT IN ('ALLOCATED', 'DELETED'))")
		return err == nil && out == "0"
	})
	settled := time.Since(start)
	before := s.ampCerts(t)
	for _, a := range before {
		v := s.cp.VMs()[a.computeID]
		hostBefore := time.Now()
		guest, err := strconv.ParseInt(strings.TrimSpace(v.MustExec("date +%s")), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		host := hostBefore.Add(time.Since(hostBefore) / 2)
		lag := host.Sub(time.Unix(guest, 0)).Round(time.Second)
		t.Logf("amphora %s: its clock lags the controller's by %s (asked for %s)", a.id, lag, amphoraClockLag)
		if lag < minClockLag {
			t.Errorf("amphora %s: its clock lags by %s, want at least %s: the lagging amphora is not tested", a.id, lag, minClockLag)
		}
		if !a.notAfter.Equal(a.dbExpiry) {
			t.Errorf("amphora %s before the rotation: the agent presents a certificate valid until %s, the database says %s",
				a.id, a.notAfter, a.dbExpiry)
		}
	}

	hk := s.serviceLog("octavia-housekeeping")
	offset := fileSize(hk)
	restarted := time.Now()
	s.cp.Restart("octavia-housekeeping", rotationOverride)
	up := time.Since(restarted)
	// rotate() logs how many flows it started once it has started them;
	// each flow logs its end, failed or not.
	done := testkit.Until(5*time.Minute, func() bool {
		log := logSince(hk, offset)
		m := rotatedCount.FindStringSubmatch(log)
		return m != nil && strconv.Itoa(len(rotationEnded.FindAllString(log, -1))) == m[1]
	})
	took := time.Since(restarted)
	var missing []string
	for _, a := range before {
		if !strings.Contains(logSince(hk, offset), "Finished amphora cert rotation, amphora's id was: "+a.id) {
			missing = append(missing, a.id)
		}
	}
	if !done || len(missing) > 0 {
		t.Errorf("housekeeping did not rotate the certificates of %v (its flows ended within 5 minutes of its restart: %v; "+
			"its log is printed at the end)", missing, done)
	}
	if failed := flowFailures(hk, offset); failed != "" {
		t.Errorf("housekeeping's rotation flow failed:\n%s", failed)
	}
	restored := fileSize(hk)
	back := time.Now()
	s.cp.Restart("octavia-housekeeping", "")
	t.Logf("housekeeping restarted with the buffer: up in %.1fs, %d certificates rotated %.1fs after the restart; "+
		"back on its own config in %.1fs", up.Seconds(), len(before), took.Seconds(), time.Since(back).Seconds())

	after := map[string]ampCert{}
	for _, a := range s.ampCerts(t) {
		after[a.id] = a
	}
	for _, old := range before {
		now, ok := after[old.id]
		if !ok {
			t.Errorf("amphora %s is gone after the rotation", old.id)
			continue
		}
		if !now.dbExpiry.After(old.dbExpiry) {
			t.Errorf("amphora %s: cert_expiration %s after the rotation, %s before: not moved", old.id, now.dbExpiry, old.dbExpiry)
		}
		if now.serial.Cmp(old.serial) == 0 || !now.notAfter.After(old.notAfter) {
			t.Errorf("amphora %s: the agent still presents serial %x valid until %s (before the rotation: %x until %s)",
				old.id, now.serial, now.notAfter, old.serial, old.notAfter)
		}
		if !now.notAfter.Equal(now.dbExpiry) {
			t.Errorf("amphora %s: the agent presents a certificate valid until %s, the database says %s", old.id, now.notAfter, now.dbExpiry)
		}
		if now.pid != old.pid {
			t.Errorf("amphora %s: the agent's MainPID is %s after the rotation, %s before: it restarted", old.id, now.pid, old.pid)
		}
		t.Logf("amphora %s: serial %x → %x, valid until %s → %s, agent pid %s", old.id, old.serial, now.serial,
			old.notAfter.Format(time.RFC3339), now.notAfter.Format(time.RFC3339), now.pid)
	}

	s.change(t, "listener l-http description after the rotation", func() {
		s.cli(t, "loadbalancer", "listener", "set", "--description", "after the certificate rotation", "l-http")
	})
	onlyFrom(t, "HTTP after the rotation", s.httpAsk(80, "/"), "member-1", "member-2")
	// By now housekeeping on its own config has long made its start-up
	// check: it must have found nothing due.
	if log := logSince(hk, restored); !strings.Contains(log, "Initiating certification rotation") ||
		strings.Contains(log, "Start amphora cert rotation") {
		t.Errorf("housekeeping back on its own config did not check, or rotated again (its log is printed at the end)")
	}
	for _, a := range before {
		s.checkSkewLogged(t, a)
	}
	t.Logf("certificate rotation: waited %.1fs for no flow, %.1fs in all", settled.Seconds(), time.Since(start).Seconds())
}

// ampCerts reads each amphora's cert_expiration from the
// database, makes a handshake with its agent as the worker does (from the
// controller's namespace, with the controller's client certificate,
// checking the amphora's certificate against the CA and its id), and asks
// systemd in the VM for the agent's MainPID.
func (s *scene) ampCerts(t *testing.T) []ampCert {
	t.Helper()
	out, err := s.cp.SQL("SELECT id, compute_id, lb_network_ip, cert_expiration FROM amphora WHERE status <> 'DELETED' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var certs []ampCert
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			t.Fatalf("amphora row %q", line)
		}
		a := ampCert{id: f[0], computeID: f[1], ip: f[2]}
		if a.dbExpiry, err = time.Parse(time.DateTime, f[3]); err != nil {
			t.Fatal(err)
		}
		cfg, err := s.cp.ControllerTLS(a.id)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		raw, err := s.cp.NS.DialContext(ctx, "tcp", net.JoinHostPort(a.ip, "9443"))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		conn := tls.Client(raw, cfg)
		err = conn.HandshakeContext(ctx)
		cancel()
		if err != nil {
			conn.Close()
			t.Fatalf("a handshake with amphora %s's agent as the controller: %v", a.id, err)
		}
		leaf := conn.ConnectionState().PeerCertificates[0]
		conn.Close()
		a.serial, a.notAfter = leaf.SerialNumber, leaf.NotAfter.UTC()
		v := s.cp.VMs()[a.computeID]
		if v == nil {
			t.Fatalf("amphora %s: no VM runs server %s", a.id, a.computeID)
		}
		a.pid = strings.TrimSpace(v.MustExec("systemctl show -p MainPID --value amphora-agent.service"))
		certs = append(certs, a)
	}
	return certs
}

// validIn is the field of the agent's warning about a rotated certificate
// that is not valid yet by its clock.
var validIn = regexp.MustCompile(`not valid yet.*"valid_in": "([^"]+)"`)

// checkSkewLogged: the agent of a lagging amphora said once (one
// rotation) that it took a certificate not valid yet, and by about how
// long its clock lags.
func (s *scene) checkSkewLogged(t *testing.T, a ampCert) {
	t.Helper()
	journal := s.cp.VMs()[a.computeID].MustExec("journalctl -b -u amphora-agent.service --no-pager -o cat | grep -F 'rotated server certificate' || true")
	all := validIn.FindAllStringSubmatch(journal, -1)
	if len(all) != 1 {
		t.Errorf("amphora %s: the agent warned %d times of a certificate not valid yet by its clock, want once (one rotation):\n%s",
			a.id, len(all), journal)
		return
	}
	m := all[0]
	early, err := time.ParseDuration(m[1])
	if err != nil || early < minClockLag-time.Minute || early > amphoraClockLag+time.Minute {
		t.Errorf("amphora %s: the agent says the certificate is valid in %q, want about the clock's lag %s", a.id, m[1], amphoraClockLag)
	}
	t.Logf("amphora %s: %s", a.id, strings.TrimSpace(journal))
}
