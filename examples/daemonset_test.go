package examples_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/policy"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const manifest = "daemonset-prefetch.yaml"

// splitYAML splits a multi-document YAML stream at its "---" lines,
// dropping documents that hold only comments.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		empty := true
		for _, l := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				empty = false
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// decode decodes every document strictly (an unknown, misspelt or
// duplicate field is an error) into the API type its apiVersion and kind name.
func decode(data []byte) (*corev1.ConfigMap, *appsv1.DaemonSet, error) {
	var (
		cm *corev1.ConfigMap
		ds *appsv1.DaemonSet
	)
	for i, doc := range splitYAML(data) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, nil, err
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			if cm != nil {
				return nil, nil, fmt.Errorf("document %d: a second ConfigMap", i+1)
			}
			cm = &corev1.ConfigMap{}
			obj = cm
		case "apps/v1 DaemonSet":
			if ds != nil {
				return nil, nil, fmt.Errorf("document %d: a second DaemonSet", i+1)
			}
			ds = &appsv1.DaemonSet{}
			obj = ds
		default:
			return nil, nil, fmt.Errorf("document %d: unexpected apiVersion %q kind %q", i+1, tm.APIVersion, tm.Kind)
		}
		// As the API server's strict decoding: YAML to JSON refusing
		// duplicate keys, then sigs.k8s.io/json, case-sensitive (Go's
		// encoding/json would take "hostPid" for hostPID), refusing
		// unknown and duplicate fields.
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, nil, fmt.Errorf("document %d (%s): %v", i+1, tm.Kind, err)
		}
		strict, err := kjson.UnmarshalStrict(js, obj)
		if err == nil {
			err = errors.Join(strict...)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d (%s): %v", i+1, tm.Kind, err)
		}
	}
	if cm == nil || ds == nil {
		return nil, nil, fmt.Errorf("want a ConfigMap and a DaemonSet")
	}
	return cm, ds, nil
}

// mountFor returns the mount whose path is the longest prefix of p.
func mountFor(mounts []corev1.VolumeMount, p string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range mounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

func TestDaemonSetPrefetch(t *testing.T) {
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	cm, ds, err := decode(data)
	if err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	if cm.Namespace == "" || cm.Namespace != ds.Namespace {
		t.Errorf("the ConfigMap (namespace %q) and the DaemonSet (%q) must share a namespace", cm.Namespace, ds.Namespace)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("the DaemonSet's selector %v does not select its pod template's labels %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostPID || !pod.HostNetwork {
		t.Errorf("hostPID %v, hostNetwork %v: the prefetch enters the node's cgroup namespace (nsenter -t 1) and pulls on the node's network", pod.HostPID, pod.HostNetwork)
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q: a hostNetwork pod that resolves cluster names needs ClusterFirstWithHostNet", pod.DNSPolicy)
	}
	tolerateAll := false
	for _, tol := range pod.Tolerations {
		tolerateAll = tolerateAll || (tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "")
	}
	if !tolerateAll {
		t.Errorf("tolerations %v: a prefetch on every node tolerates every taint", pod.Tolerations)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("the container must be privileged and root (mount namespace, setns, cgroups, uid drop; the runtime's seccomp profile refuses unshare): %+v", c.SecurityContext)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v: want cpu and memory requests and a memory limit", c.Resources)
	}

	// Every mount names a volume, and every volume is mounted.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("volumeMount %s (%s) names no volume", m.Name, m.MountPath)
		}
		mounted[m.Name] = true
	}
	for n := range volumes {
		if !mounted[n] {
			t.Errorf("volume %s is never mounted", n)
		}
	}
	// The node's directories pullhelper needs, each at its own path.
	for _, p := range []string{"/run/containerd", "/sys/fs/cgroup", "/run/pullhelper", "/var/run/netns", "/var/lib/pullhelper", "/etc/containerd"} {
		m, ok := mountFor(c.VolumeMounts, p)
		if !ok || m.MountPath != p {
			t.Errorf("no volumeMount at %s", p)
			continue
		}
		if hp := volumes[m.Name].HostPath; hp == nil || hp.Path != p {
			t.Errorf("the volume mounted at %s must be the node's %s (hostPath), not %+v", p, p, volumes[m.Name].VolumeSource)
		}
	}
	if m, _ := mountFor(c.VolumeMounts, "/var/run/netns"); m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("/var/run/netns must be mounted with mountPropagation HostToContainer, so that namespaces created later appear")
	}

	// The command is a shell script sh can parse, and runs pullhelper with
	// the ConfigMap's policy.
	if len(c.Command) != 2 || c.Command[1] != "-c" || len(c.Args) != 1 {
		t.Fatalf("want command [SHELL -c] and one script in args, got %q %q", c.Command, c.Args)
	}
	if out, err := exec.Command("sh", "-n", "-c", c.Args[0]).CombinedOutput(); err != nil {
		t.Errorf("sh -n: the container's script does not parse: %v\n%s", err, out)
	}
	script := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
	m := regexp.MustCompile(`/usr/bin/pullhelper pull --policy (\S+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("the container's command does not run pullhelper pull --policy FILE: %q", script)
	}
	policyPath := m[1]
	pm, ok := mountFor(c.VolumeMounts, policyPath)
	if !ok || volumes[pm.Name].ConfigMap == nil || volumes[pm.Name].ConfigMap.Name != cm.Name {
		t.Fatalf("--policy %s is not in a volume of ConfigMap %s", policyPath, cm.Name)
	}
	rel, _ := filepath.Rel(pm.MountPath, policyPath)
	src, ok := cm.Data[rel]
	if !ok {
		t.Fatalf("--policy %s: ConfigMap %s has no key %q", policyPath, cm.Name, rel)
	}
	if !strings.Contains(script, "pullhelper gc --policy "+policyPath) {
		t.Errorf("the command does not run pullhelper gc with the same policy: %q", script)
	}
	if im := regexp.MustCompile(`<(\S+)`).FindStringSubmatch(script); im == nil || cm.Data[strings.TrimPrefix(im[1], pm.MountPath+"/")] == "" {
		t.Errorf("the command's image list %v is not a non-empty key of the ConfigMap", im)
	}

	// The policy is valid, and every file it names is in a mounted volume.
	f, err := policy.Parse("ConfigMap "+cm.Name+" "+rel, []byte(src))
	if err != nil {
		t.Fatalf("the ConfigMap's policy: %v", err)
	}
	l, err := f.Select("")
	if err != nil {
		t.Fatal(err)
	}
	paths := append([]string{l.Auth.ContainerdConfig, l.Dest.ContainerdAddress, l.Dest.ContainerdStaging}, l.Auth.PullSecrets...)
	for _, io := range l.Cgroup.IOWriteBPS {
		target, _, err := policy.ParseIOLimit(io, false)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, target)
	}
	for _, p := range paths {
		if p == "" {
			t.Errorf("the policy leaves a path unset (%v)", paths)
			continue
		}
		if _, ok := mountFor(c.VolumeMounts, p); !ok {
			t.Errorf("the policy names %s, which no volumeMount provides", p)
		}
	}
	if sm, _ := mountFor(c.VolumeMounts, l.Auth.PullSecrets[0]); volumes[sm.Name].Secret == nil {
		t.Errorf("the pull secret %s is not in a Secret volume", l.Auth.PullSecrets[0])
	} else if m := volumes[sm.Name].Secret.DefaultMode; m == nil || *m&0o077 != 0 {
		mode := "unset (0644)"
		if m != nil {
			mode = fmt.Sprintf("%#o", *m)
		}
		t.Errorf("the pull secret's volume must be readable by root only (defaultMode 0400), not %s", mode)
	}
}

// The decoding above is strict: a misspelt field fails it.
func TestDaemonSetDecodingIsStrict(t *testing.T) {
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to string }{
		{"hostPID: true", "hostPid: true"},
		{"mountPropagation: HostToContainer", "mountPropagation: HostToContainer\n              mountPropgation: x"},
		{"kind: DaemonSet", "kind: Daemonset"},
		{"  hostNetwork: true", "  hostNetwork: true\n      hostNetwork: true"},
	} {
		bad := bytes.Replace(data, []byte(c.from), []byte(c.to), 1)
		if bytes.Equal(bad, data) {
			t.Fatalf("%q is not in %s", c.from, manifest)
		}
		if _, _, err := decode(bad); err == nil {
			t.Errorf("%q → %q: decoded without an error", c.from, c.to)
		}
	}
}

// Kubernetes' API types stay out of the binary. The one exception is the
// CRI's protocol, k8s.io/cri-api/pkg/apis/runtime/v1 (generated protobuf
// and gRPC stubs, no other k8s.io package), which `pullhelper cri` serves.
// Prometheus is linked for `pullhelper cri --metrics-listen` as
// client_golang's prometheus, collectors and promhttp with what they need
// (client_model, common's expfmt and model, procfs, and their two small
// helpers): nothing of Prometheus' server, no push gateway client, no
// test utilities.
func TestBinaryHasNoKubernetesTypes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pullhelper/pullhelper/cmd/pullhelper").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	promOK := []string{
		"github.com/prometheus/client_golang/prometheus",
		"github.com/prometheus/client_golang/prometheus/internal",
		"github.com/prometheus/client_golang/prometheus/collectors",
		"github.com/prometheus/client_golang/prometheus/promhttp",
		"github.com/prometheus/client_golang/prometheus/promhttp/internal",
		"github.com/prometheus/client_golang/internal/",
		"github.com/prometheus/client_model/go",
		"github.com/prometheus/common/expfmt",
		"github.com/prometheus/common/model",
		"github.com/prometheus/procfs",
		"github.com/beorn7/perks/quantile",
		"github.com/munnerz/goautoneg",
	}
	linked := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		linked[d] = true
		if d == "k8s.io/cri-api/pkg/apis/runtime/v1" {
			continue
		}
		if strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/") {
			t.Errorf("cmd/pullhelper depends on %s", d)
		}
		if strings.HasPrefix(d, "github.com/prometheus/") || strings.HasPrefix(d, "github.com/beorn7/") || strings.HasPrefix(d, "github.com/munnerz/") {
			ok := false
			for _, p := range promOK {
				if d == p || strings.HasSuffix(p, "/") && strings.HasPrefix(d, p) || p == "github.com/prometheus/procfs" && strings.HasPrefix(d, p+"/internal/") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("cmd/pullhelper depends on %s, not in the Prometheus packages allowed for --metrics-listen", d)
			}
		}
	}
	if !linked["github.com/prometheus/client_golang/prometheus/promhttp"] {
		t.Errorf("cmd/pullhelper does not link promhttp: --metrics-listen has no server")
	}
}
