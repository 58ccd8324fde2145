package target

import "strings"

// Spec is DEST split into its transport and path. It must be
// JSON-representable: it is the "destination" object of the plan, and the
// copy's (Anonymous).
type Spec struct {
	Raw       string `json:"raw"`
	Transport string `json:"transport"`
	Path      string `json:"path"`
	Ref       string `json:"ref,omitempty"`
	// Store is the containers-storage store (nil for the other
	// transports); Path is then GRAPHROOT/pullhelper-import, where the
	// staging area goes.
	Store *StoreSpec `json:"store,omitempty"`
}

// String renders the destination with its absolute path:
// transport:ABS[:ref].
func (s Spec) String() string {
	if s.Store != nil {
		return s.Transport + ":" + s.Store.String() + s.Ref
	}
	out := s.Transport + ":" + s.Path
	if s.Ref != "" {
		out += ":" + s.Ref
	}
	return out
}

// HiddenPath stands for DEST's path in a Spec sent to the copy, which needs
// only the transport and the reference (Anonymous).
const HiddenPath = "/(dest)"

// Anonymous is s without DEST's path: what the isolated copy is told, so
// that its request names no host path. The parent reports the real one.
func (s Spec) Anonymous() Spec {
	a := Spec{Transport: s.Transport, Path: HiddenPath, Ref: s.Ref}
	a.Raw = s.Transport + ":DEST"
	if s.Ref != "" {
		a.Raw += ":" + s.Ref
	}
	return a
}

// StoreSpec is a containers-storage store as DEST and storage.conf name
// it: what explain shows and the result's destination renders.
type StoreSpec struct {
	// Driver is the graph driver ("" : the store picks one, as podman).
	Driver        string   `json:"driver"`
	GraphRoot     string   `json:"graph_root"`
	RunRoot       string   `json:"run_root"`
	DriverOptions []string `json:"driver_options,omitempty"`
	// Conf is the storage.conf the defaults came from ("" : containers/
	// storage's search: $CONTAINERS_STORAGE_CONF, else the first of the
	// user's, /etc/containers' and /usr/share/containers' storage.conf,
	// then their drop-ins, then $CONTAINERS_STORAGE_CONF_OVERRIDE;
	// built-in defaults where none is found).
	Conf string `json:"storage_conf,omitempty"`
}

// String is the containers-transports(5) store specifier
// [DRIVER@GRAPHROOT+RUNROOT:OPTIONS].
func (s *StoreSpec) String() string {
	out := "["
	if s.Driver != "" {
		out += s.Driver + "@"
	}
	out += s.GraphRoot + "+" + s.RunRoot
	if len(s.DriverOptions) > 0 {
		out += ":" + strings.Join(s.DriverOptions, ",")
	}
	return out + "]"
}
