package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// maxRetryWait bounds one wait between retries, whatever Retry-After says.
const maxRetryWait = 5 * time.Minute

// retry runs try (one pass over the endpoints) until it succeeds, fails
// finally, or the retries are spent; it waits between passes as Hooks
// say. The context bounds every wait.
func (c *Client) retry(ctx context.Context, what string, try func() error) error {
	delay := c.hooks.RetryDelay
	for attempt := 1; ; attempt++ {
		err := try()
		if err == nil || attempt > c.hooks.Retries || ctx.Err() != nil || !mayPass(err) {
			return err
		}
		wait := jitter(delay)
		if ra := retryAfterOf(err); ra > wait {
			wait = ra
		}
		wait = min(wait, maxRetryWait)
		if c.hooks.OnRetry != nil {
			c.hooks.OnRetry(what, attempt, c.hooks.Retries+1, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		if delay < maxRetryWait {
			delay *= 2
		}
	}
}

// jitter spreads d by ±20 % so that many pulls do not retry in step.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// mayPass: another pass may succeed. The last endpoint's answer decides
// (the registry's, after its mirrors): a final answer from it is final.
func mayPass(err error) bool {
	var fb *FallbackError
	if errors.As(err, &fb) && len(fb.Errs) > 0 {
		err = fb.Errs[len(fb.Errs)-1]
	}
	return transient(err)
}

// transient: a connection error, a broken body, 408, 429, a 5xx or the
// codes UNAVAILABLE and TOOMANYREQUESTS; not a refusal by the caller's
// hooks, a TLS failure (a plain-http answer to https among them), a size
// limit, another 4xx.
func transient(err error) bool {
	var (
		fe   *failure.Error
		se   *StatusError
		tl   *TooLargeError
		ua   x509.UnknownAuthorityError
		hn   x509.HostnameError
		ci   x509.CertificateInvalidError
		cv   *tls.CertificateVerificationError
		rh   tls.RecordHeaderError
		al   tls.AlertError
		noEp = errors.Is(err, ErrNoEndpoint) || errors.Is(err, ErrTooManyRedirects)
	)
	switch {
	case noEp, errors.As(err, &fe), errors.As(err, &tl), errors.Is(err, context.Canceled),
		errors.As(err, &ua), errors.As(err, &hn), errors.As(err, &ci), errors.As(err, &cv),
		errors.As(err, &rh), errors.As(err, &al), errors.Is(err, http.ErrSchemeMismatch):
		return false
	case errors.As(err, &se):
		// A registry that says it is unavailable or rate-limiting is
		// asked again whatever the status it says it with (a 400 with
		// UNAVAILABLE), as containers/common's retry treats these codes.
		return se.StatusCode == 408 || se.StatusCode == 429 || se.StatusCode >= 500 ||
			se.Code == "UNAVAILABLE" || se.Code == "TOOMANYREQUESTS"
	}
	var te *TokenError
	var he *HostError
	return errors.As(err, &te) || errors.As(err, &he)
}

// retryAfterOf is the largest Retry-After among err's answers.
func retryAfterOf(err error) time.Duration {
	var out time.Duration
	var fb *FallbackError
	errs := []error{err}
	if errors.As(err, &fb) {
		errs = fb.Errs
	}
	for _, e := range errs {
		var se *StatusError
		if errors.As(e, &se) && se.RetryAfter > out {
			out = se.RetryAfter
		}
	}
	return out
}
