package pull

import (
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Request is one copy: everything the network-facing code needs, resolved
// by the pipeline. It must stay JSON-representable: it crosses the pipe to
// the isolated child. Secrets and file contents travel in Material.
type Request struct {
	Image       string      `json:"image"`
	Reference   string      `json:"reference"`
	Registry    string      `json:"registry"`
	Destination target.Spec `json:"destination"`
	// Endpoints are the hosts the copy contacts, in order (mirrors or a
	// containerd server first, the primary last), each with its own
	// credential candidates (by ID; secrets are in Material) and trust.
	Endpoints []wire.Endpoint `json:"endpoints"`
	// Credentials and Trust are the primary endpoint's (the last): the
	// candidates tried in order (empty means anonymous).
	Credentials []wire.Credential `json:"credentials"`
	AuthFiles   []wire.AuthFile   `json:"auth_files"`
	Trust       wire.Trust        `json:"trust"`
	// TLSVerify false turns certificate checks off for every host
	// (--tls-verify=false); per-host exceptions are in the endpoints.
	TLSVerify    bool                `json:"tls_verify"`
	Signature    api.SignaturePolicy `json:"signature_policy"`
	Retries      int                 `json:"retries"`
	RetryDelay   time.Duration       `json:"retry_delay_ns"`
	Timeout      time.Duration       `json:"timeout_ns"`
	StallTimeout time.Duration       `json:"stall_timeout_ns"`
	// MinRate (bytes/s) over StallWindow: a blob or manifest arriving slower fails the
	// attempt (0: no rate watchdog).
	MinRate     int64         `json:"min_rate,omitempty"`
	StallWindow time.Duration `json:"stall_window_ns,omitempty"`
	// MaxBandwidth caps the bytes read from the network per second for
	// the whole pull (0: none).
	MaxBandwidth     int64 `json:"max_bandwidth,omitempty"`
	ParallelLayers   int   `json:"parallel_layers"`
	AllArchitectures bool  `json:"all_architectures"`
	// Platform chooses the instance of an index to copy (--platform;
	// nil: this machine's), as containers/image's OSChoice,
	// ArchitectureChoice and VariantChoice do.
	Platform *wire.Platform `json:"platform,omitempty"`
	// UserAgent is sent on every registry request ("pullhelper/VERSION").
	UserAgent string `json:"user_agent"`
	// MaxImageBytes bounds one image: its declared sizes, the bytes read
	// and the bytes written into staging (0: DefaultMaxImageBytes).
	MaxImageBytes int64 `json:"max_image_bytes,omitempty"`
}

// platformName names the platform whose instance of an index is copied.
func (p *Request) platformName() string {
	if p.Platform == nil {
		return "this platform"
	}
	return "platform " + p.Platform.String()
}
