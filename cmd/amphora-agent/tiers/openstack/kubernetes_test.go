//go:build openstack

package openstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Kubernetes tier: a Service of type LoadBalancer through the real
// openstack-cloud-controller-manager (its service controller) onto this
// cloud's Octavia and our amphorae. A cluster without kubelets
// (../internal/kubernetes/kube.sh): etcd, kube-apiserver and the CCM in
// the cloud; three "nodes", network namespaces each plugged into a
// Neutron port of the demo user's network, serving the Services'
// NodePorts with the plugin's test server. Opt-in: make test-kubernetes
// (AMPHORA_KUBE_TOOLS names kube-tools.sh's folder).

// kubeCluster is the cluster of the run, made by the first test that
// asks.
type kubeCluster struct {
	nodes  map[string]kubeNode
	subnet string
}

type kubeNode struct {
	Name, IP, PortID string
}

var (
	kubeOnce sync.Once
	theKube  *kubeCluster
	kubeErr  error
)

const (
	kubeCIDR    = "198.51.100.128/26"
	kubeGateway = "198.51.100.129"
)

var kubeNodeNames = []string{"node1", "node2", "node3"}

func kube(t *testing.T) (*Cloud, *kubeCluster) {
	t.Helper()
	if os.Getenv("AMPHORA_KUBE_TOOLS") == "" {
		t.Skip("AMPHORA_KUBE_TOOLS is unset: make test-kubernetes sets it")
	}
	c := cloud(t)
	kubeOnce.Do(func() {
		// The set-up's t.Fatal ends the asking test; the next one sees
		// kubeErr.
		kubeErr = fmt.Errorf("the Kubernetes cluster's set-up failed in an earlier test")
		theKube = startKube(t, c)
		kubeErr = nil
	})
	if kubeErr != nil {
		t.Fatal(kubeErr)
	}
	return c, theKube
}

// startKube makes the demo user's network for the cluster (routed to the
// public network), a security group letting the NodePorts in from it,
// one port per node plugged into a network namespace, and starts etcd,
// the API server and the CCM.
func startKube(t *testing.T, c *Cloud) *kubeCluster {
	const user = "demo"
	start := time.Now()
	k := &kubeCluster{nodes: map[string]kubeNode{}}
	routedSubnet(t, c, user, "kube", kubeCIDR)
	var subnet, public struct {
		ID string `json:"id"`
	}
	c.OS(t, user, &subnet, "subnet", "show", "kube-subnet")
	c.OS(t, user, &public, "network", "show", "public")
	k.subnet = subnet.ID
	// What a cluster's node security group lets in: the NodePorts (and
	// health check node ports, from the same range) from the subnet,
	// where the amphorae's member-side addresses are.
	c.OS(t, user, nil, "security", "group", "create", "kube-nodes")
	c.OS(t, user, nil, "security", "group", "rule", "create", "--protocol", "tcp", "--dst-port", "30000:32767",
		"--remote-ip", kubeCIDR, "kube-nodes")
	c.OS(t, user, nil, "security", "group", "rule", "create", "--protocol", "icmp", "kube-nodes")
	for _, name := range kubeNodeNames {
		var port struct {
			ID       string `json:"id"`
			MAC      string `json:"mac_address"`
			FixedIPs []struct {
				IP string `json:"ip_address"`
			} `json:"fixed_ips"`
		}
		c.OS(t, user, &port, "port", "create", "--network", "kube-net", "--security-group", "kube-nodes",
			"--device", "kube-"+name, name)
		if len(port.FixedIPs) != 1 {
			t.Fatalf("port %s: fixed IPs %+v", name, port.FixedIPs)
		}
		// Bound to the one compute host, as Nova would: the Open vSwitch
		// agent there wires the device named after the port.
		c.OS(t, "admin", nil, "port", "set", "--host", "aa-openstack", port.ID)
		ip := port.FixedIPs[0].IP
		kubeSh(t, c, "node", name, port.ID, port.MAC, ip+"/26", kubeGateway)
		k.nodes[name] = kubeNode{Name: name, IP: ip, PortID: port.ID}
	}
	for _, n := range k.nodes {
		Until(t, "port of "+n.Name+" ACTIVE", 3*time.Minute, 2*time.Second, func() (bool, string) {
			var p struct {
				Status string `json:"status"`
			}
			c.OS(t, "admin", &p, "port", "show", n.PortID)
			return p.Status == "ACTIVE", p.Status
		})
	}
	// Every node reaches the outside of the cloud through its port and the
	// project's router: a test server there answers (the root has no ping).
	startTestServers(t, c, 8099)
	Until(t, "the nodes reach the outside through their router", 2*time.Minute, time.Second, func() (bool, string) {
		for _, n := range k.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := c.Exec(ctx, nil, "ip", "netns", "exec", n.Name, "curl", "-s", "--max-time", "3", "http://203.0.113.1:8099/")
			cancel()
			if err != nil || strings.TrimSpace(out) != "1" {
				return false, fmt.Sprintf("%s: %q %v", n.Name, out, err)
			}
		}
		return true, ""
	})
	t.Logf("kubernetes tier: network, security group and three node namespaces on Neutron ports in %v", time.Since(start).Round(100*time.Millisecond))
	s := time.Now()
	out := kubeSh(t, c, "up", subnet.ID, public.ID)
	t.Logf("kubernetes tier: %s (%v)", strings.TrimSpace(out), time.Since(s).Round(100*time.Millisecond))
	return k
}

func kubeSh(t *testing.T, c *Cloud, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := c.Exec(ctx, nil, append([]string{"/aa/kube.sh"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubectl runs kubectl in the cloud (the test's kubeconfig is root's
// default there), with stdin given.
func kubectl(t *testing.T, c *Cloud, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.Exec(ctx, nil, append([]string{"bash", "-c", `printf %s "$1" | kubectl "${@:2}"`, "kubectl", stdin}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// register makes the Node object of a node namespace, unless it exists,
// with what a kubelet registers (its create carries the status): its
// InternalIP and Ready. In one request: the CCM syncs its load balancers
// when a Node appears, not when its addresses change, so a Node created
// bare and given its address after would stay out of the pools. Then
// the Ready condition's heartbeat through the status subresource, as a
// kubelet's status updates do (nothing else sets it here).
func (k *kubeCluster) register(t *testing.T, c *Cloud, name string) {
	t.Helper()
	n := k.nodes[name]
	now := time.Now().UTC().Format(time.RFC3339)
	status := map[string]any{
		"addresses": []map[string]string{{"type": "InternalIP", "address": n.IP}, {"type": "Hostname", "address": name}},
		"conditions": []map[string]string{{"type": "Ready", "status": "True", "reason": "KubeletReady",
			"message": "a network namespace of the test", "lastHeartbeatTime": now, "lastTransitionTime": now}},
	}
	node := map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"kubernetes.io/hostname": name}},
		"status":   status,
	}
	if strings.TrimSpace(kubectl(t, c, "", "get", "nodes", "-o", "name", "--field-selector", "metadata.name="+name)) == "" {
		b, _ := json.Marshal(node)
		kubectl(t, c, string(b), "create", "-f", "-")
	}
	b, _ := json.Marshal(map[string]any{"status": status})
	kubectl(t, c, "", "patch", "node", name, "--subresource=status", "--type=merge", "-p", string(b))
	var got struct {
		Status struct {
			Addresses []struct{ Address string } `json:"addresses"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(kubectl(t, c, "", "get", "node", name, "-o", "json")), &got); err != nil ||
		len(got.Status.Addresses) == 0 || got.Status.Addresses[0].Address != n.IP {
		t.Fatalf("node %s: addresses %+v (%v)", name, got.Status.Addresses, err)
	}
}

type kubeService struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Ports []struct {
			Name     string `json:"name"`
			Port     int    `json:"port"`
			NodePort int    `json:"nodePort"`
		} `json:"ports"`
		HealthCheckNodePort int `json:"healthCheckNodePort"`
	} `json:"spec"`
	Status struct {
		LoadBalancer struct {
			Ingress []struct {
				IP string `json:"ip"`
			} `json:"ingress"`
		} `json:"loadBalancer"`
	} `json:"status"`
}

func getService(t *testing.T, c *Cloud, name string) kubeService {
	t.Helper()
	var s kubeService
	out := kubectl(t, c, "", "get", "service", name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("service %s: %v: %q", name, err, out)
	}
	return s
}

// serveNodePorts starts, on every node, a test server on each of the
// Service's NodePorts not served yet: what kube-proxy's rules would do.
func (k *kubeCluster) serveNodePorts(t *testing.T, c *Cloud, s kubeService, served map[int]bool) {
	t.Helper()
	for _, p := range s.Spec.Ports {
		if served[p.NodePort] {
			continue
		}
		for _, name := range kubeNodeNames {
			kubeSh(t, c, "serve", name, fmt.Sprint(p.NodePort))
		}
		served[p.NodePort] = true
	}
}

// askMany asks url n times from outside the cloud and counts the answers
// by body (the node's name); "" counts failures.
func askMany(c *Cloud, url string, n int) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*5*time.Second+30*time.Second)
	defer cancel()
	out, _ := c.Exec(ctx, nil, "bash", "-c", `for i in $(seq 1 "$2"); do echo "$(curl -s --max-time 3 "$1")"; done`, "ask", url, fmt.Sprint(n))
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		seen[strings.TrimSpace(line)]++
	}
	return seen
}

// untilAnswers waits until every named node has answered through url
// (and nothing else has).
func untilAnswers(t *testing.T, c *Cloud, what, url string, limit time.Duration, want ...string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	Until(t, what, limit, time.Second, func() (bool, string) {
		for k, v := range askMany(c, url, 6) {
			seen[k] += v
		}
		for _, w := range want {
			if seen[w] == 0 {
				return false, fmt.Sprintf("answers so far %v", seen)
			}
		}
		return true, ""
	})
	return seen
}

type osPool struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type osMember struct {
	Name            string `json:"name"`
	Address         string `json:"address"`
	OperatingStatus string `json:"operating_status"`
}

// lbByName finds the CCM's load balancer of a Service (its name is
// kube_service_<cluster>_<namespace>_<service>).
func lbByName(t *testing.T, c *Cloud, service string) osLB {
	t.Helper()
	var lbs []osLB
	c.OS(t, "demo", &lbs, "loadbalancer", "list", "--name", "kube_service_kube_default_"+service)
	if len(lbs) != 1 {
		t.Fatalf("load balancers of service %s: %+v", service, lbs)
	}
	return lbs[0]
}

// poolMembers lists each pool's members' names, sorted, by pool name.
func poolMembers(t *testing.T, c *Cloud, lbID string) (map[string][]string, map[string][]osMember) {
	t.Helper()
	var pools []osPool
	c.OS(t, "demo", &pools, "loadbalancer", "pool", "list", "--loadbalancer", lbID)
	names := map[string][]string{}
	all := map[string][]osMember{}
	for _, p := range pools {
		var ms []osMember
		c.OS(t, "demo", &ms, "loadbalancer", "member", "list", p.ID)
		for _, m := range ms {
			names[p.Name] = append(names[p.Name], m.Name)
		}
		sort.Strings(names[p.Name])
		all[p.Name] = ms
	}
	return names, all
}

// untilMembers waits until every pool of the load balancer has exactly
// the named nodes as members and the load balancer is ACTIVE.
func untilMembers(t *testing.T, c *Cloud, lbID string, pools int, want ...string) {
	t.Helper()
	sort.Strings(want)
	Until(t, fmt.Sprintf("%d pools with members %v", pools, want), 10*time.Minute, 3*time.Second, func() (bool, string) {
		var lb osLB
		c.OS(t, "demo", &lb, "loadbalancer", "show", lbID)
		names, _ := poolMembers(t, c, lbID)
		if len(names) != pools || lb.ProvisioningStatus != "ACTIVE" {
			return false, fmt.Sprintf("%s %v", lb.ProvisioningStatus, names)
		}
		for _, got := range names {
			if strings.Join(got, ",") != strings.Join(want, ",") {
				return false, fmt.Sprintf("%v", names)
			}
		}
		return true, ""
	})
}

// TestKubernetesService is the life of a Service of type LoadBalancer:
// the CCM's load balancer with a floating IP in the Service's status,
// every node reached through it from outside the cloud; a second Service
// port becoming a second listener; a node joining and leaving the pools;
// externalTrafficPolicy Local with endpoints on two of three nodes; the
// Service's deletion leaving nothing behind in Octavia or Neutron.
func TestKubernetesService(t *testing.T) {
	c, k := kube(t)
	const name = "web"
	k.register(t, c, "node1")
	k.register(t, c, "node2")
	served := map[int]bool{}

	start := time.Now()
	extIP := k.createService(t, c, `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
		"spec": {"type": "LoadBalancer", "selector": {"app": "web"},
			"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}`, served)
	lb := lbByName(t, c, name)
	url := "http://" + extIP + "/"
	seen := untilAnswers(t, c, "node1 and node2 through "+url, url, 5*time.Minute, "node1", "node2")
	t.Logf("step create: node1 and node2 reached through %s %v after the Service's creation (answers %v)", url, time.Since(start).Round(100*time.Millisecond), seen)

	// A second port: a second listener (and pool) on the same load balancer.
	s := time.Now()
	kubectl(t, c, "", "patch", "service", name, "--type=json", "-p",
		`[{"op": "add", "path": "/spec/ports/-", "value": {"name": "alt", "port": 8080, "targetPort": 8080, "protocol": "TCP"}}]`)
	svc := getService(t, c, name)
	k.serveNodePorts(t, c, svc, served)
	Until(t, "a second listener", 10*time.Minute, 3*time.Second, func() (bool, string) {
		var ls []struct {
			Port int `json:"protocol_port"`
		}
		c.OS(t, "demo", &ls, "loadbalancer", "listener", "list", "--loadbalancer", lb.ID)
		return len(ls) == 2, fmt.Sprintf("%+v", ls)
	})
	untilAnswers(t, c, "both nodes on port 8080", "http://"+extIP+":8080/", 5*time.Minute, "node1", "node2")
	t.Logf("step port: listener on 8080 answering %v after the patch", time.Since(s).Round(100*time.Millisecond))

	// A node joins: a member of each pool, and answering.
	s = time.Now()
	k.register(t, c, "node3")
	untilMembers(t, c, lb.ID, 2, "node1", "node2", "node3")
	untilAnswers(t, c, "node3 through "+url, url, 5*time.Minute, "node3")
	t.Logf("step node join: node3 in both pools and answering %v after its registration", time.Since(s).Round(100*time.Millisecond))

	// A node leaves.
	s = time.Now()
	kubectl(t, c, "", "delete", "node", "node2")
	untilMembers(t, c, lb.ID, 2, "node1", "node3")
	t.Logf("step node leave: node2 out of both pools %v after its deletion", time.Since(s).Round(100*time.Millisecond))
	if got := askMany(c, url, 12); got["node2"] > 0 || got["node1"] == 0 || got["node3"] == 0 {
		t.Errorf("answers after node2 left: %v", got)
	}
	k.register(t, c, "node2")
	untilMembers(t, c, lb.ID, 2, "node1", "node2", "node3")

	// externalTrafficPolicy Local, the Service's endpoints ("pods") on
	// node1 and node2: their kube-proxy stand-in answers 200 on the
	// health check node port, node3's 503.
	s = time.Now()
	kubectl(t, c, "", "patch", "service", name, "--type=merge", "-p", `{"spec": {"externalTrafficPolicy": "Local"}}`)
	svc = getService(t, c, name)
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatalf("no health check node port: %+v", svc.Spec)
	}
	for n, code := range map[string]string{"node1": "200", "node2": "200", "node3": "503"} {
		kubeSh(t, c, "health", n, fmt.Sprint(svc.Spec.HealthCheckNodePort), code)
	}
	Until(t, "node3's members ERROR, the load balancer DEGRADED", 10*time.Minute, 3*time.Second, func() (bool, string) {
		var l osLB
		c.OS(t, "demo", &l, "loadbalancer", "show", lb.ID)
		_, pools := poolMembers(t, c, lb.ID)
		ok := l.OperatingStatus == "DEGRADED" && l.ProvisioningStatus == "ACTIVE" && len(pools) == 2
		for _, ms := range pools {
			for _, m := range ms {
				want := "ONLINE"
				if m.Name == "node3" {
					want = "ERROR"
				}
				ok = ok && m.OperatingStatus == want
			}
		}
		return ok, fmt.Sprintf("%s/%s %+v", l.ProvisioningStatus, l.OperatingStatus, pools)
	})
	t.Logf("step Local: node3 ERROR, load balancer DEGRADED %v after the patch", time.Since(s).Round(100*time.Millisecond))
	for _, u := range []string{url, "http://" + extIP + ":8080/"} {
		got := askMany(c, u, 30)
		if got["node3"] > 0 || got[""] > 0 || got["node1"] == 0 || got["node2"] == 0 {
			t.Errorf("Local: answers through %s: %v (want node1 and node2 only)", u, got)
		} else {
			t.Logf("Local: answers through %s: %v", u, got)
		}
	}

	// The Service's deletion: the load balancer and its floating IP gone,
	// nothing of them left in Neutron.
	deleteService(t, c, name)
	logKubeMemory(t, c)
}

// checkNothingLeft: on the cluster's network only the nodes', the DHCP
// server's and the router's ports; no amphora server; no security group
// of a load balancer (Octavia names them lb-<id>).
func checkNothingLeft(t *testing.T, c *Cloud) {
	t.Helper()
	Until(t, "nothing of the load balancer left in Neutron and Nova", 5*time.Minute, 3*time.Second, func() (bool, string) {
		var ports []struct {
			Name  string `json:"Name"`
			Owner string `json:"Device Owner"`
		}
		c.OS(t, "admin", &ports, "port", "list", "--network", "kube-net", "--long")
		var left []string
		for _, p := range ports {
			switch {
			case p.Owner == "network:dhcp", p.Owner == "network:router_interface":
			case p.Owner == "" && strings.HasPrefix(p.Name, "node"):
			default:
				left = append(left, p.Name+" ("+p.Owner+")")
			}
		}
		var sgs []struct {
			Name string `json:"Name"`
		}
		c.OS(t, "admin", &sgs, "security", "group", "list")
		for _, g := range sgs {
			// Octavia's group of a load balancer's VIP: lb-<its id>.
			if len(g.Name) == len("lb-")+36 && strings.HasPrefix(g.Name, "lb-") {
				left = append(left, "security group "+g.Name)
			}
		}
		var servers []struct{ Name string }
		c.OS(t, "admin", &servers, "server", "list", "--all-projects")
		for _, s := range servers {
			left = append(left, "server "+s.Name)
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// TestKubernetesActiveStandby: a Service whose load balancer is of the
// operator's active-standby Octavia flavor (the CCM's flavor-id
// annotation); the MASTER amphora powered off under traffic through the
// Service's external IP, the asks counted while the BACKUP takes over and
// the health manager rebuilds the lost amphora.
func TestKubernetesActiveStandby(t *testing.T) {
	c, k := kube(t)
	const name = "pair"
	for _, n := range kubeNodeNames {
		k.register(t, c, n)
	}
	var flavor struct {
		ID string `json:"id"`
	}
	c.OS(t, "demo", &flavor, "loadbalancer", "flavor", "show", "active-standby")
	served := map[int]bool{}
	start := time.Now()
	extIP := k.createService(t, c, fmt.Sprintf(`{"apiVersion": "v1", "kind": "Service",
		"metadata": {"name": "pair", "annotations": {"loadbalancer.openstack.org/flavor-id": %q}},
		"spec": {"type": "LoadBalancer", "selector": {"app": "pair"},
			"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}`, flavor.ID), served)
	url := "http://" + extIP + "/"
	untilAnswers(t, c, "every node through "+url, url, 5*time.Minute, kubeNodeNames...)
	t.Logf("every node reached through %s %v after the Service's creation", url, time.Since(start).Round(100*time.Millisecond))

	lb := lbByName(t, c, name)
	cutMasterUnderTraffic(t, c, "demo", lb.ID, url, "the Service's external IP")
	untilAnswers(t, c, "every node after the failover", url, 3*time.Minute, kubeNodeNames...)

	deleteService(t, c, name)
}

// createService creates a Service from its JSON, serves its NodePorts on
// every node, and waits for its external IP, which it returns.
func (k *kubeCluster) createService(t *testing.T, c *Cloud, manifest string, served map[int]bool) string {
	t.Helper()
	var m struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil {
		t.Fatal(err)
	}
	name := m.Metadata.Name
	start := time.Now()
	kubectl(t, c, manifest, "create", "-f", "-")
	t.Cleanup(func() {
		if t.Failed() {
			c.saveAmphorae(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c.Exec(ctx, nil, "kubectl", "delete", "service", name, "--wait=false")
		}
	})
	svc := getService(t, c, name)
	k.serveNodePorts(t, c, svc, served)
	Until(t, "service "+name+"'s external IP", 25*time.Minute, 3*time.Second, func() (bool, string) {
		svc = getService(t, c, name)
		return len(svc.Status.LoadBalancer.Ingress) > 0, fmt.Sprintf("%+v", svc.Status)
	})
	extIP := svc.Status.LoadBalancer.Ingress[0].IP
	t.Logf("service %s: external IP %s in its status %v after its creation", name, extIP, time.Since(start).Round(100*time.Millisecond))
	return extIP
}

// deleteService deletes a Service and waits until its load balancer and
// floating IP are gone and nothing of them is left in Neutron or Nova.
func deleteService(t *testing.T, c *Cloud, name string) {
	t.Helper()
	s := time.Now()
	kubectl(t, c, "", "delete", "service", name)
	Until(t, "the load balancer and floating IP deleted", 10*time.Minute, 3*time.Second, func() (bool, string) {
		var lbs []osLB
		var fips []struct {
			IP string `json:"Floating IP Address"`
		}
		c.OS(t, "demo", &lbs, "loadbalancer", "list")
		c.OS(t, "demo", &fips, "floating", "ip", "list")
		return len(lbs) == 0 && len(fips) == 0, fmt.Sprintf("load balancers %+v, floating IPs %+v", lbs, fips)
	})
	t.Logf("service %s deleted: load balancer and floating IP gone after %v", name, time.Since(s).Round(100*time.Millisecond))
	checkNothingLeft(t, c)
}

// logKubeMemory logs the proportional set size of the cluster's three
// programs (the rest of the cloud is the OpenStack tier's).
func logKubeMemory(t *testing.T, c *Cloud) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Exec(ctx, nil, "bash", "-c", `for d in /proc/[0-9]*; do
	c=$(cat $d/comm 2>/dev/null) || continue
	case $c in etcd | kube-apiserver | openstack-cloud*) echo "$c $(awk '/^Pss:/ {print int($2 / 1024)}' $d/smaps_rollup) MiB" ;; esac
done`)
	if err != nil {
		t.Logf("the cluster's memory: %v", err)
		return
	}
	t.Logf("the cluster's memory (PSS): %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", ", "))
}
