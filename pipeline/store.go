package pipeline

import (
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/policy"
)

// configureStore hands a store DEST (containerd:) its [dest] settings;
// other kinds need none.
func (p *Plan) configureStore(l *policy.Loaded) error {
	s, ok, err := dest.ConfigureContainerd(p.dst, dest.ContainerdSettings{
		Address: l.Dest.ContainerdAddress, Namespace: l.Dest.ContainerdNamespace,
		Snapshotter: l.Dest.ContainerdSnapshotter, Staging: l.Dest.ContainerdStaging, Pin: l.Dest.Pin,
	})
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
