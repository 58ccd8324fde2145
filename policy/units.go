package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count. In TOML and on the command line it is an integer
// number of bytes or a string with a unit: "512Mi", "1G", "100MB", "64KiB".
// Binary units (Ki, Mi, Gi, Ti, Pi, Ei, with or without B) are powers of
// 1024; decimal ones (k/K, M, G, T, P, E, with or without B) powers of 1000,
// as Kubernetes quantities take them. "max" means no limit (0).
type Size int64

// Rate is bytes per second: a Size with an optional "/s" suffix ("20MB/s").
type Rate int64

// Cores is a CPU allowance in cores: 0.5, 2, or Kubernetes millicores "500m".
type Cores float64

// Duration is a Go duration string ("90s", "5m", "1h30m") or whole seconds.
type Duration time.Duration

// Count is a non-negative integer.
type Count int

var sizeUnits = map[string]float64{
	"": 1, "B": 1,
	"k": 1e3, "K": 1e3, "kB": 1e3, "KB": 1e3,
	"M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
	"P": 1e15, "PB": 1e15, "E": 1e18, "EB": 1e18,
	"Ki": 1 << 10, "KiB": 1 << 10, "Mi": 1 << 20, "MiB": 1 << 20,
	"Gi": 1 << 30, "GiB": 1 << 30, "Ti": 1 << 40, "TiB": 1 << 40,
	"Pi": 1 << 50, "PiB": 1 << 50, "Ei": 1 << 60, "EiB": 1 << 60,
}

// ParseSize parses a size as described at Size.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "max" {
		return 0, nil
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit such as 512Mi, 1G or 100MB", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %v", s, err)
	}
	v := math.Round(f * mult)
	// float64(math.MaxInt64) is 2^63: anything at or above it overflows.
	if v >= float64(math.MaxInt64) || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid size %q: too large; the maximum is %d bytes (just under 8Ei)", s, int64(math.MaxInt64))
	}
	return Size(v), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (z *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	*z = v
	return err
}

// UnmarshalTOML accepts an integer number of bytes or a string.
func (z *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("invalid size %d: must not be negative", x)
		}
		*z = Size(x)
		return nil
	case string:
		return z.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("invalid size %v: want an integer or a string such as \"512Mi\"", v)
}

// ParseRate parses a rate as described at Rate.
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	v, err := ParseSize(t)
	if err != nil {
		if strings.Contains(err.Error(), "too large") {
			return 0, fmt.Errorf("invalid rate %q: too large; the maximum is %d bytes per second", s, int64(math.MaxInt64))
		}
		return 0, fmt.Errorf("invalid rate %q: want bytes per second such as 20MB/s or 10Mi", s)
	}
	return Rate(v), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	*r = v
	return err
}

// UnmarshalTOML accepts an integer number of bytes per second or a string.
func (r *Rate) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("invalid rate %d: must not be negative", x)
		}
		*r = Rate(x)
		return nil
	case string:
		return r.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("invalid rate %v: want an integer or a string such as \"20MB/s\"", v)
}

// ParseCores parses a CPU allowance as described at Cores.
func ParseCores(s string) (Cores, error) {
	t := strings.TrimSpace(s)
	div := 1.0
	if strings.HasSuffix(t, "m") {
		t, div = strings.TrimSuffix(t, "m"), 1000
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid CPU quota %q: want cores such as 0.5 or millicores such as 500m", s)
	}
	return checkCores(f / div)
}

func checkCores(f float64) (Cores, error) {
	// The cgroup's quota is at least 1 ms of a 100 ms period: 0.01 cores
	// (a smaller quota would be raised to it, not applied as given).
	if f < 0 || (f > 0 && f < 0.01) || f > 4096 {
		return 0, fmt.Errorf("invalid CPU quota %g: want 0 (no limit) or between 0.01 (10m) and 4096 cores", f)
	}
	return Cores(f), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Cores) UnmarshalText(b []byte) error {
	v, err := ParseCores(string(b))
	*c = v
	return err
}

// UnmarshalTOML accepts a float, an integer or a string.
func (c *Cores) UnmarshalTOML(v any) error {
	var (
		x   Cores
		err error
	)
	switch t := v.(type) {
	case float64:
		x, err = checkCores(t)
	case int64:
		x, err = checkCores(float64(t))
	case string:
		x, err = ParseCores(t)
	default:
		err = fmt.Errorf("invalid CPU quota %v: want a number of cores", v)
	}
	*c = x
	return err
}

// MaxDuration is the longest duration a setting accepts: time.Duration's
// maximum, about 292 years.
const MaxDuration = Duration(math.MaxInt64)

// maxSeconds is the largest whole number of seconds that fits MaxDuration.
const maxSeconds = int64(math.MaxInt64 / int64(time.Second))

func tooLong(s string) error {
	return fmt.Errorf("invalid duration %q: too large; the maximum is %s (%d seconds)", s, time.Duration(MaxDuration), maxSeconds)
}

// ParseDuration parses a duration as described at Duration. A value that
// does not fit time.Duration is an error, never a wrapped-around one.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if isDigits(t) {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n > maxSeconds {
			return 0, tooLong(s)
		}
		return Duration(time.Duration(n) * time.Second), nil
	}
	if strings.HasPrefix(t, "-") && isDigits(t[1:]) {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		if durationSyntax.MatchString(t) {
			// Well-formed but rejected: time.ParseDuration overflowed.
			return 0, tooLong(s)
		}
		return 0, fmt.Errorf("invalid duration %q: want a value such as 90s, 5m or 1h", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	return Duration(d), nil
}

// durationSyntax is time.ParseDuration's grammar (without a sign); a string
// that matches it and still fails to parse overflowed.
var durationSyntax = regexp.MustCompile(`^\+?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	*d = v
	return err
}

// UnmarshalTOML accepts a duration string or whole seconds.
func (d *Duration) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("invalid duration %d: must not be negative", x)
		}
		return d.UnmarshalText([]byte(strconv.FormatInt(x, 10)))
	case string:
		return d.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("invalid duration %v: want a string such as \"90s\"", v)
}

// MarshalText renders the duration as Go does ("1m30s").
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalTOML accepts a non-negative integer.
func (c *Count) UnmarshalTOML(v any) error {
	x, ok := v.(int64)
	if !ok {
		return fmt.Errorf("invalid value %v: want a non-negative integer", v)
	}
	if x < 0 {
		return fmt.Errorf("invalid value %d: want a non-negative integer", x)
	}
	if x > math.MaxInt32 {
		return fmt.Errorf("invalid value %d: too large; the maximum is %d", x, math.MaxInt32)
	}
	*c = Count(x)
	return nil
}
