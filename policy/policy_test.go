package policy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/policy"
)

const example = `version = 1

[pull]
retries = 5
timeout = "10m"
parallel_layers = 3

[trust]
certs_d = ["/srv/certs.d"]
insecure_registries = ["*.example.test"]

[profiles.os-update.pull]
retries = 9

[profiles.fast]
pull = { parallel_layers = 12 }
`

func TestParseExample(t *testing.T) {
	f, err := policy.Parse("p.toml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	base, err := f.Select("")
	if err != nil {
		t.Fatal(err)
	}
	if base.Pull.Retries != 5 || time.Duration(base.Pull.Timeout) != 10*time.Minute || base.Pull.ParallelLayers != 3 {
		t.Fatalf("base pull = %+v", base.Pull)
	}
	if got := base.Trust.CertsD; len(got) != 1 || got[0] != "/srv/certs.d" {
		t.Fatalf("certs_d must replace the default list, got %v", got)
	}
	if !base.Trust.TLSVerify {
		t.Fatal("tls_verify default lost")
	}
	osu, err := f.Select("os-update")
	if err != nil {
		t.Fatal(err)
	}
	if osu.Pull.Retries != 9 || osu.Pull.ParallelLayers != 3 || time.Duration(osu.Pull.Timeout) != 10*time.Minute {
		t.Fatalf("profile must override only what it sets: %+v", osu.Pull)
	}
	fast, _ := f.Select("fast")
	if fast.Pull.ParallelLayers != 12 || fast.Pull.Retries != 5 {
		t.Fatalf("fast = %+v", fast.Pull)
	}
	if base.Pull.Retries != 5 {
		t.Fatal("selecting a profile changed the base")
	}
	if _, err := f.Select("nope"); err == nil || !strings.Contains(err.Error(), `no profile "nope"`) || !strings.Contains(err.Error(), "fast, os-update") {
		t.Fatalf("unknown profile error = %v", err)
	}
}

// A cgroup name with a controller's prefix is no control file of every
// cgroup: accepted (only the kernel's own files, tasks and cgroup.*, are
// refused).
func TestControllerLikeCgroupNamesAccepted(t *testing.T) {
	for _, doc := range []string{"parent = \"/cpu.slice/pods\"", "parent = \"/pids.limited\"", "path = \"/kubepods.slice/memory.high-tier\""} {
		if _, err := policy.Parse("p.toml", []byte("version = 1\n[cgroup]\n"+doc+"\n")); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown key", "version = 1\n[pull]\nretries = 1\nretires = 2\n", "p.toml:4: pull.retires: unknown key"},
		{"unknown section", "version = 1\n\n[pulll]\nx = 1\n", "p.toml:3: unknown key outside the policy's sections (sections are [pull],"},
		{"unknown key in profile", "version = 1\n[profiles.a.pull]\nbogus = 1\n", "p.toml:3: profiles.a.pull.bogus: unknown key"},
		{"negative retries", "version = 1\n[pull]\nretries = -1\n", "p.toml:3: pull.retries: invalid value -1"},
		{"wrong type", "version = 1\n[pull]\nretries = \"three\"\n", "p.toml:3: pull.retries: invalid value three"},
		{"apples", "version = 1\n[cgroup]\nmemory_max = \"12 apples\"\n", `p.toml:3: cgroup.memory_max: invalid size "12 apples"`},
		{"bad duration", "version = 1\n[pull]\ntimeout = \"soon\"\n", `p.toml:3: pull.timeout: invalid duration "soon"`},
		{"bad cores", "version = 1\n[cgroup]\ncpu_quota = -0.5\n", "p.toml:3: cgroup.cpu_quota: invalid CPU quota"},
		{"syntax", "version = 1\n[pull\n", "to end table name"},
		{"missing version", "[pull]\nretries = 1\n", "p.toml:1: version: missing"},
		{"version 2", "version = 2\n", "p.toml:1: version: unsupported version 2"},
		{"parallel zero", "version = 1\n[pull]\nparallel_layers = 0\n", "p.toml:3: pull.parallel_layers: must be between 1 and 64"},
		{"relative path", "version = 1\n[auth]\nauthfile = \"auth.json\"\n", "p.toml:3: auth.authfile: must be an absolute path"},
		{"bad driver", "version = 1\n[cgroup]\ndriver = \"lxc\"\n", `p.toml:3: cgroup.driver: must be "auto"`},
		{"high above max", "version = 1\n[cgroup]\nmemory_max = \"64Mi\"\nmemory_high = \"1Gi\"\n", "p.toml:4: cgroup.memory_high: (1073741824 bytes) must not exceed memory_max"},
		{"joined with limits", "version = 1\n[cgroup]\npath = \"/kubepods/x\"\npids_max = 10\n", "p.toml:3: cgroup.path: joins an existing cgroup as it is"},
		{"profile joined with limits", "version = 1\n[cgroup]\npids_max = 64\n[profiles.pod.cgroup]\npath = \"/kubepods/x\"\n", "cgroup.path: joins an existing cgroup as it is"},
		{"cgroup name too long", "version = 1\n[cgroup]\nparent = \"/a/" + strings.Repeat("b", 256) + "\"\n", "p.toml:3: cgroup.parent: \"/a/bbb"},
		{"control file as parent", "version = 1\n[cgroup]\nparent = \"/x/tasks\"\n", `p.toml:3: cgroup.parent: "/x/tasks" names "tasks", a cgroup's control file, not a cgroup`},
		{"control file as path", "version = 1\n[cgroup]\npath = \"/kubepods/cgroup.procs\"\n", `cgroup.path: "/kubepods/cgroup.procs" names "cgroup.procs"`},
		{"relative certs_d", "version = 1\n[trust]\ncerts_d = [\"/etc/containers/certs.d\", \"certs.d\"]\n", "p.toml:3: trust.certs_d: entry 2: must be an absolute path, not \"certs.d\""},
		{"relative storage_conf", "version = 1\n[dest]\nstorage_conf = \"storage.conf\"\n", "p.toml:3: dest.storage_conf: must be an absolute path"},
		{"memory max below the child's", "version = 1\n[cgroup]\nmemory_max = \"8Mi\"\n", "p.toml:3: cgroup.memory_max: 8388608 bytes is too small for the pull child"},
		{"bad io", "version = 1\n[cgroup]\nio_read_bps = [\"sda=1M\"]\n", "p.toml:3: cgroup.io_read_bps"},
		{"bad mode", "version = 1\n[network]\nmode = \"bridge\"\n", `p.toml:3: network.mode: must be "host"`},
		{"bad nameserver", "version = 1\n[network.dns]\nnameservers = [\"10.0.0.300\"]\n", "p.toml:3: network.dns.nameservers: entry 1"},
		{"root user", "version = 1\n[privileges]\nuser = \"0\"\n", "p.toml:3: privileges.user: must be"},
		{"insecure pattern", "version = 1\n[trust]\ninsecure_registries = [\"https://x\"]\n", "p.toml:3: trust.insecure_registries: entry 1"},
		{"netns without mode", "version = 1\n[network]\nnetns = \"/run/netns/x\"\n", "p.toml:3: network.netns: needs network.mode"},
		{"cluster-dns without servers", "version = 1\n[network]\nmode = \"cluster-dns\"\n", "p.toml:3: network.mode: \"cluster-dns\" needs"},
		{"dns in host mode", "version = 1\n[network.dns]\nsearch = [\"a.b\"]\n", "p.toml:3: network.dns.search: needs network.mode"},
		{"stall window too short", "version = 1\n[pull]\nmin_rate = \"1KiB/s\"\nstall_window = \"100ms\"\n", "p.toml:4: pull.stall_window: must be at least 1s while pull.min_rate is set, not 100ms"},
		{"max bandwidth below min rate", "version = 1\n[pull]\nmax_bandwidth = 100\n", "p.toml:3: pull.max_bandwidth: 100 B/s is below pull.min_rate (1024 B/s): every blob would be failed as too slow; raise it or lower pull.min_rate (0 disables it)"},
		{"stall timeout too short", "version = 1\n[pull]\nstall_timeout = \"1ns\"\n", "p.toml:3: pull.stall_timeout: must be 0 (no stall timeout) or at least 1s, not 1ns"},
		{"sa token without registries", "version = 1\n[auth]\nservice_account_token = \"/t\"\n", "p.toml:3: auth.service_account_token: needs auth.service_account_registries"},
		{"provider annotations without token", "version = 1\n[auth]\nprovider_service_account_annotations = [\"a.io/b=c\"]\n", "p.toml:3: auth.provider_service_account_annotations: needs auth.provider_service_account_token"},
		{"provider annotation syntax", "version = 1\n[auth]\nprovider_service_account_token = \"/t\"\nprovider_service_account_annotations = [\"a.io/b\"]\n", `p.toml:4: auth.provider_service_account_annotations: entry 1: "a.io/b" must be KEY=VALUE`},
		{"provider annotation key", "version = 1\n[auth]\nprovider_service_account_token = \"/t\"\nprovider_service_account_annotations = [\"ok.io/x=1\", \"-bad=1\"]\n", `p.toml:4: auth.provider_service_account_annotations: entry 2: invalid annotation key "-bad"`},
		{"provider annotation twice", "version = 1\n[auth]\nprovider_service_account_token = \"/t\"\nprovider_service_account_annotations = [\"A.io/x=1\", \"A.io/x=2\"]\n", `entry 2: annotation key "A.io/x" given twice`},
		{"provider token relative", "version = 1\n[auth]\nprovider_service_account_token = \"t\"\n", "p.toml:3: auth.provider_service_account_token: must be an absolute path"},
		{"profile bad value", "version = 1\n[profiles.p.pull]\nparallel_layers = 100\n", "p.toml:3: profiles.p.pull.parallel_layers: must be between 1 and 64"},
		{"profile version", "version = 1\n[profiles.p]\nversion = 1\n", "p.toml:3: profiles.p.version: a profile cannot set version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("p.toml", []byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.doc)
			}
			if !strings.HasPrefix(err.Error(), tc.want) && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]policy.Size{"512Mi": 512 << 20, "1G": 1e9, "100MB": 100e6, "64KiB": 64 << 10, "1048576": 1 << 20, "1.5Gi": 3 << 29, "max": 0, "0": 0,
		"2Pi": 2 << 50, "1P": 1e15, "7Ei": 7 << 60, "1EB": 1e18}
	for in, want := range sizes {
		if got, err := policy.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"12 apples", "", "Mi", "-5", "1.2.3M", "5m"} {
		if _, err := policy.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	if r, err := policy.ParseRate("20MB/s"); err != nil || r != 20e6 {
		t.Errorf("ParseRate = %d, %v", r, err)
	}
	if c, err := policy.ParseCores("500m"); err != nil || c != 0.5 {
		t.Errorf("ParseCores(500m) = %v, %v", c, err)
	}
	for _, in := range []string{"-1", "abc", "NaN", "0.0001", "5000"} {
		if _, err := policy.ParseCores(in); err == nil {
			t.Errorf("ParseCores(%q) accepted", in)
		}
	}
	if d, err := policy.ParseDuration("90"); err != nil || time.Duration(d) != 90*time.Second {
		t.Errorf("ParseDuration(90) = %v, %v", d, err)
	}
	if _, err := policy.ParseDuration("-1s"); err == nil {
		t.Error("negative duration accepted")
	}
}

func TestIOLimit(t *testing.T) {
	if tgt, v, err := policy.ParseIOLimit("/var/lib=20MB/s", false); err != nil || tgt != "/var/lib" || v != 20e6 {
		t.Errorf("got %q %d %v", tgt, v, err)
	}
	if tgt, v, err := policy.ParseIOLimit("8:0=100", true); err != nil || tgt != "8:0" || v != 100 {
		t.Errorf("got %q %d %v", tgt, v, err)
	}
	for _, in := range []string{"sda=1M", "/x=", "=5", "8:0=fast", "8:x=1M"} {
		if _, _, err := policy.ParseIOLimit(in, false); err == nil {
			t.Errorf("ParseIOLimit(%q) accepted", in)
		}
	}
}

func TestSetFromFlags(t *testing.T) {
	l := policy.Defaults()
	if err := l.Set("--retries", "pull.retries", policy.Int, "7"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("--timeout", "pull.timeout", policy.String, "2m"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("--tls-verify", "trust.tls_verify", policy.Bool, "false"); err != nil {
		t.Fatal(err)
	}
	if l.Pull.Retries != 7 || time.Duration(l.Pull.Timeout) != 2*time.Minute || l.Trust.TLSVerify {
		t.Fatalf("flags not applied: %+v %+v", l.Pull, l.Trust)
	}
	if src, ok := l.Defined("pull.retries"); !ok || src != "--retries" {
		t.Fatalf("Defined = %q %v", src, ok)
	}
	err := l.Set("--memory-max", "cgroup.memory_max", policy.String, "12 apples")
	if err == nil || !strings.HasPrefix(err.Error(), `--memory-max: invalid size "12 apples"`) {
		t.Fatalf("err = %v", err)
	}
	if err := l.Set("--retries", "pull.retries", policy.Int, "-2"); err == nil || !strings.HasPrefix(err.Error(), "--retries:") {
		t.Fatalf("negative retries via flag: %v", err)
	}
	if err := l.Set("--service-account-token", "auth.service_account_token", policy.String, "/t"); err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), "--service-account-token: needs auth.service_account_registries") {
		t.Fatalf("validate = %v", err)
	}
	// Quoting: a value with quotes and backslashes survives intact.
	if err := l.Set("--authfile", "auth.authfile", policy.String, `/tmp/a "b"\c`); err != nil || l.Auth.Authfile != `/tmp/a "b"\c` {
		t.Fatalf("quoting: %q %v", l.Auth.Authfile, err)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.toml")
	if err := os.WriteFile(p, []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := policy.Resolve(p, "os-update")
	if err != nil || l.Pull.Retries != 9 || l.File != p || l.Profile != "os-update" {
		t.Fatalf("Resolve = %+v, %v", l, err)
	}
	t.Setenv(policy.EnvPolicy, p)
	if l, err := policy.Resolve("", ""); err != nil || l.Pull.Retries != 5 {
		t.Fatalf("env resolve = %v", err)
	}
	if _, err := policy.Resolve(filepath.Join(dir, "missing.toml"), ""); err == nil || !strings.Contains(err.Error(), "missing.toml: reading policy") {
		t.Fatalf("missing explicit file: %v", err)
	}
}

func TestDepcheck(t *testing.T) {
	// policy/ must stay plain data: no containers/image, cgroup or netns code,
	// directly or through another package.
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"go.podman.io/", "github.com/containers/", "github.com/opencontainers/cgroups", "github.com/vishvananda/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("policy depends on %s", dep)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/BurntSushi/toml") {
		t.Fatal("go list output looks wrong: toml missing")
	}
}

func TestTypeErrorsNameLineAndKey(t *testing.T) {
	for doc, want := range map[string]string{
		"version = 1\n[pull]\nall_architectures = \"yes\"\n": "p.toml:3: pull.all_architectures: incompatible types",
		"version = 1\n[trust]\ncerts_d = \"/etc/x\"\n":       "p.toml:3: trust.certs_d: incompatible types",
		"version = \"1\"\n": "p.toml:1: version: incompatible types",
	} {
		_, err := policy.Parse("p.toml", []byte(doc))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: err = %v, want prefix %q", doc, err, want)
		}
	}
}

// [cri]: the annotation that chooses a profile, the profiles pods may
// choose (named in the file, set by the base only), and per profile where
// the pull's cgroup goes and whether the pod's DNS is used.
func TestCRI(t *testing.T) {
	doc := `version = 1
[cri]
profile_annotation = "pullhelper.io/profile"
pod_profiles = ["small", "cluster"]
[profiles.small.cri]
pull_cgroup = "pod"
[profiles.small.cgroup]
memory_max = "64Mi"
[profiles.cluster.cri]
pod_dns = true
[profiles.other.pull]
retries = 1
`
	f, err := policy.Parse("p.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := f.Select("")
	if base.CRI.PullCgroup != "own" || base.CRI.PodDNS || base.CRI.ProfileAnnotation != "pullhelper.io/profile" || len(base.CRI.PodProfiles) != 2 {
		t.Fatalf("base [cri] = %+v", base.CRI)
	}
	small, _ := f.Select("small")
	if small.CRI.PullCgroup != "pod" || small.CRI.PodDNS || small.Cgroup.MemoryMax != 64<<20 {
		t.Fatalf("small: %+v %d", small.CRI, small.Cgroup.MemoryMax)
	}
	cluster, _ := f.Select("cluster")
	if cluster.CRI.PullCgroup != "own" || !cluster.CRI.PodDNS {
		t.Fatalf("cluster [cri] = %+v", cluster.CRI)
	}
	if d := policy.Default().CRI; d.PullCgroup != "own" || d.PodDNS || d.ProfileAnnotation != "" {
		t.Fatalf("default [cri] = %+v", d)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"bad pull_cgroup", "version = 1\n[cri]\npull_cgroup = \"node\"\n", `p.toml:3: cri.pull_cgroup: must be "own" (under cgroup.parent) or "pod"`},
		{"pod and cgroup.path", "version = 1\n[cgroup]\npath = \"/kubepods/x\"\n[cri]\npull_cgroup = \"pod\"\n", `p.toml:5: cri.pull_cgroup: "pod" puts the pull's cgroup under the pod's cgroup parent; it cannot also join cgroup.path "/kubepods/x"`},
		{"bad annotation key", "version = 1\n[profiles.a.pull]\nretries = 1\n[cri]\nprofile_annotation = \"-bad/x\"\npod_profiles = [\"a\"]\n", `p.toml:5: cri.profile_annotation: "-bad/x" is not an annotation key`},
		{"annotation without profiles", "version = 1\n[cri]\nprofile_annotation = \"a.io/p\"\n", "p.toml:3: cri.profile_annotation: needs cri.pod_profiles"},
		{"profiles without annotation", "version = 1\n[profiles.a.pull]\nretries = 1\n[cri]\npod_profiles = [\"a\"]\n", "p.toml:5: cri.pod_profiles: needs cri.profile_annotation"},
		{"unknown profile", "version = 1\n[profiles.a.pull]\nretries = 1\n[cri]\nprofile_annotation = \"a.io/p\"\npod_profiles = [\"a\", \"b\"]\n", `p.toml:6: cri.pod_profiles: entry 2: no profile "b" in the policy file (profiles: a)`},
		{"listed twice", "version = 1\n[profiles.a.pull]\nretries = 1\n[cri]\nprofile_annotation = \"a.io/p\"\npod_profiles = [\"a\", \"a\"]\n", `cri.pod_profiles: entry 2: "a" is listed twice`},
		{"profile widens the list", "version = 1\n[profiles.a.cri]\npod_profiles = [\"a\"]\nprofile_annotation = \"a.io/p\"\n", "profiles.a.cri.pod_profiles: a profile cannot set cri.pod_profiles (set it in the base [cri])"},
		{"unknown key", "version = 1\n[cri]\npod_dns_servers = [\"1.1.1.1\"]\n", "p.toml:3: cri.pod_dns_servers: unknown key (see pullhelper-policy.toml(5) for the keys of [cri])"},
		{"pod_dns type", "version = 1\n[cri]\npod_dns = \"yes\"\n", "p.toml:3: cri.pod_dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("p.toml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line with %q", err, tc.want)
			}
		})
	}
}
