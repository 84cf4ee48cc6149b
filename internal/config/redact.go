package config

import (
	"net/url"
	"regexp"
)

// A value that may hold a secret is shown in an error in part, or not at
// all: a URL without its user information, query and fragment; a value
// that holds a bootstrap token, as a certificate key always is, as hidden.

// Hidden stands in an error for a value it does not show.
const Hidden = "(hidden)"

// RedactedURL is raw, a URL, as an error may show it (the configuration's
// and the commands' errors alike): its user
// information (user:password@), query and fragment, any of which may hold
// a secret key, are replaced by xxxxx; a raw that is no URL of the form
// scheme://host is hidden.
func RedactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return Hidden
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if u.RawQuery != "" {
		u.RawQuery = "xxxxx"
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "xxxxx", ""
	}
	return u.String()
}

// tokenWithin finds a bootstrap token in a value, alone or in other text
// such as sha256:<token>, but not in a longer name such as a host's.
var tokenWithin = regexp.MustCompile(`(^|[^a-z0-9.])[a-z0-9]{6}\.[a-z0-9]{16}($|[^a-z0-9.])`)
