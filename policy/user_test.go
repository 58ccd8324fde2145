package policy_test

import (
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/policy"
)

// privileges.user beyond a uid's range is a usage error when the policy is
// checked: 4294967295 is (uid_t)-1, "unchanged" to setresuid, and 2^32 is
// truncated to 0 by it.
func TestUserRange(t *testing.T) {
	for _, u := range []string{"4294967295", "4294967296", "18446744073709551616", "99999999999999999999999", "-1", "-4294967296", "+0", "00", "+-1", "+5", "007"} {
		_, err := policy.Parse("p.toml", []byte("version = 1\n[privileges]\nuser = \""+u+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "p.toml:3: privileges.user") {
			t.Errorf("user %q: want a refusal at privileges.user, got %v", u, err)
		}
	}
	// "+5" and "007" would take gid = uid where "5" takes the passwd
	// primary group: one spelling only, the error naming the form.
	for _, u := range []string{"+5", "007"} {
		_, err := policy.Parse("p.toml", []byte("version = 1\n[privileges]\nuser = \""+u+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "plain decimal") {
			t.Errorf("user %q: %v; want a refusal naming the plain decimal form", u, err)
		}
	}
	for _, u := range []string{"1", "65534", "4294967294", "nobody", "dynamic", "user-1"} {
		if _, err := policy.Parse("p.toml", []byte("version = 1\n[privileges]\nuser = \""+u+"\"\n")); err != nil {
			t.Errorf("user %q: %v", u, err)
		}
	}
}
