package pipeline

import (
	"fmt"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/policy"
)

// configureStore hands a store DEST (containerd:) its [dest] settings;
// other kinds need none. With auth.containerd_config (--containerd-config)
// the daemon's config gives the defaults of the socket, the CRI's
// snapshotter and namespace (dest.ReadContainerdConfig); a setting given
// explicitly (a flag, the policy file) wins, with a warning when it
// differs from what the config says.
func (p *Plan) configureStore(l *policy.Loaded) error {
	want := dest.ContainerdSettings{
		Address: l.Dest.ContainerdAddress, Namespace: l.Dest.ContainerdNamespace,
		Snapshotter: l.Dest.ContainerdSnapshotter, Staging: l.Dest.ContainerdStaging, Pin: l.Dest.Pin,
		Source: p.Reference,
	}
	if _, set := l.Defined("dest.pin"); set && !l.Dest.Pin {
		want.Unpin = true
	}
	if p.dst != nil && p.dst.Spec().Transport == "containerd" {
		if err := p.containerdDefaults(l, &want); err != nil {
			return err
		}
	}
	s, ok, err := dest.ConfigureContainerd(p.dst, want)
	if !ok {
		if l.Dest.Pin {
			p.Warnings = append(p.Warnings, "dest.pin (--pin) applies to containerd: destinations only; ignored")
		}
		return nil
	}
	if err != nil {
		return failure.New(failure.Usage, "destination %s: %w", p.dst.Spec().Raw, err)
	}
	p.Containerd = &s
	return nil
}

// RuntimeHandlerSetting is what sets dest.containerd_snapshotter to the
// snapshotter a pod's runtime handler names in the containerd config
// (pullhelper cri, dest.ContainerdDaemon.RuntimeSnapshotters): not a
// setting that differs from the config, so no warning says it does.
const RuntimeHandlerSetting = "the pod's runtime handler (its snapshotter in the containerd config)"

// containerdDefaults fills want's address, snapshotter and namespace
// from the containerd config (when one is set) unless set explicitly, and
// records in want.From what set each.
func (p *Plan) containerdDefaults(l *policy.Loaded, want *dest.ContainerdSettings) error {
	want.From = map[string]string{}
	cfg := &dest.ContainerdDaemon{}
	if path := l.Auth.ContainerdConfig; path != "" {
		var err error
		if cfg, err = dest.ReadContainerdConfig(path); err != nil {
			return failure.New(failure.Usage, "%s: %v", settingName(l, "auth.containerd_config"), err)
		}
		want.Config = path
	}
	for _, s := range []struct {
		key, name    string
		val          *string
		cfgVal, from string
	}{
		{"dest.containerd_address", "address", &want.Address, cfg.Address, cfg.AddressKey},
		{"dest.containerd_snapshotter", "snapshotter", &want.Snapshotter, cfg.Snapshotter, cfg.SnapshotterKey},
		{"dest.containerd_namespace", "namespace", &want.Namespace, cfg.Namespace, "the CRI's (containerd has no setting for it)"},
	} {
		if src, set := l.Defined(s.key); set && src == RuntimeHandlerSetting {
			// The pod's runtime handler's own snapshotter, from this
			// same config: where containerd's CRI puts its images.
			want.From[s.name] = src
			continue
		}
		if _, set := l.Defined(s.key); set {
			want.From[s.name] = settingName(l, s.key)
			if want.Config != "" && *s.val != s.cfgVal {
				p.Warnings = append(p.Warnings, fmt.Sprintf("%s %q differs from the %s the containerd config %s gives the CRI (%q): the image goes where %s says, not where the kubelet's images are",
					settingName(l, s.key), *s.val, s.name, want.Config, s.cfgVal, settingName(l, s.key)))
			}
			continue
		}
		switch {
		case want.Config == "":
			want.From[s.name] = "default"
		case s.from != "":
			*s.val, want.From[s.name] = s.cfgVal, s.from
		default:
			*s.val, want.From[s.name] = s.cfgVal, "containerd's default (the config does not set it)"
		}
	}
	return nil
}

// reportStore adds what a store DEST reported after its commit: the image
// ID as the runtime sees it and the store it went to.
func (p *Plan) reportStore(res *api.Result) {
	r, ok := p.dst.(dest.Reporter)
	if !ok || r.Committed() == nil {
		return
	}
	c := r.Committed()
	res.Destination = p.dst.String()
	res.ImageID = c.ImageID
	s := c.Store
	res.Store = &s
}
