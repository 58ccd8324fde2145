package pull

import (
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/auth"
)

// Request is one copy: everything the network-facing code needs, resolved
// by the pipeline. It must stay JSON-representable: it crosses the pipe to
// the isolated child. Secrets and file contents travel in Material.
type Request struct {
	Image       string      `json:"image"`
	Reference   string      `json:"reference"`
	Registry    string      `json:"registry"`
	Destination Destination `json:"destination"`
	// Credentials are the matching credentials in the order they are
	// tried (secrets never marshal); empty means anonymous.
	Credentials      []auth.Credential   `json:"credentials"`
	AuthFiles        []auth.AuthFile     `json:"auth_files"`
	Trust            auth.Trust          `json:"trust"`
	Signature        api.SignaturePolicy `json:"signature_policy"`
	Retries          int                 `json:"retries"`
	RetryDelay       time.Duration       `json:"retry_delay_ns"`
	Timeout          time.Duration       `json:"timeout_ns"`
	StallTimeout     time.Duration       `json:"stall_timeout_ns"`
	ParallelLayers   int                 `json:"parallel_layers"`
	AllArchitectures bool                `json:"all_architectures"`
	// UserAgent is sent on every registry request ("pullhelper/VERSION").
	UserAgent string `json:"user_agent"`
}
