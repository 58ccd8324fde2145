//go:build pullhelper_hostile

package reexec

// Actions of a compromised child against the pipeline's checks.
func init() {
	// ignore-signature-policy: the child judges the image with an
	// accept-anything policy instead of the one it was handed (a child
	// that skips the check); the parent must judge it again.
	registerHostile("ignore-signature-policy", func(env *hostileEnv) (bool, int) {
		env.Req.Material.SignaturePolicy = []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`)
		return false, 0
	})
}
