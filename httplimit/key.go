package httplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/door"
)

// KeyFunc appends to dst the identity a policy limits for a request: a
// client address, a user, an API key, or a composition. An error means the
// identity cannot be found; the request is then decided by the policy's
// fail mode, never under a shared key. Appending (rather than returning a
// string) lets the middleware build keys without allocating.
type KeyFunc func(dst []byte, r *http.Request, p *Policy) ([]byte, error)

// ErrNoKey is wrapped by key functions that find no identity.
var ErrNoKey = errors.New("httplimit: no key for request")

// ErrInvalidKey is wrapped by key functions that find an identity no
// counter may be kept under: empty, longer than sluice.MaxIdentityLen,
// not UTF-8 or holding a control character (NUL too), the rule every
// front door of sluice applies. The middleware answers 400, charging
// nothing. It applies the rule to every key it is given, a
// composition's NUL separators aside.
var ErrInvalidKey = door.ErrInvalidIdentity

// identity appends v, an identity the client gave, to dst, or refuses
// it by the rule of every door (ErrInvalidKey); from says where it was
// read.
func identity(dst []byte, v, from string) ([]byte, error) {
	if err := door.Identity(v); err != nil {
		return dst, fmt.Errorf("httplimit: %s: %w", from, err)
	}
	return append(dst, v...), nil
}

// ClientIP keys by the client's address as resolver finds it, IPv6 grouped
// by prefix. Choose the resolver for your deployment: see package clientip.
func ClientIP(resolver *clientip.Resolver) KeyFunc {
	return func(dst []byte, r *http.Request, _ *Policy) ([]byte, error) {
		p, err := resolver.Prefix(r)
		if err != nil {
			return dst, fmt.Errorf("%w: %w", ErrNoKey, err)
		}
		if p.IsSingleIP() {
			return p.Addr().AppendTo(dst), nil
		}
		return p.AppendTo(dst), nil
	}
}

// User keys by the user ID that authentication middleware stored in the
// request's context under ctxKey, as a string.
func User(ctxKey any) KeyFunc {
	return func(dst []byte, r *http.Request, _ *Policy) ([]byte, error) {
		if id, ok := r.Context().Value(ctxKey).(string); ok && id != "" {
			return identity(dst, id, "the user in the request context")
		}
		return dst, fmt.Errorf("%w: no user in the request context", ErrNoKey)
	}
}

// UserFunc keys by the user ID that f finds in ctx.
func UserFunc(f func(ctx context.Context) (string, bool)) KeyFunc {
	return func(dst []byte, r *http.Request, _ *Policy) ([]byte, error) {
		if id, ok := f(r.Context()); ok && id != "" {
			return identity(dst, id, "the user in the request context")
		}
		return dst, fmt.Errorf("%w: no user in the request context", ErrNoKey)
	}
}

// APIKey keys by the value of header, such as X-API-Key. User, UserFunc
// and APIKey refuse an identity no counter may be kept under
// (ErrInvalidKey).
func APIKey(header string) KeyFunc {
	header = http.CanonicalHeaderKey(header)
	return func(dst []byte, r *http.Request, _ *Policy) ([]byte, error) {
		if v := r.Header.Get(header); v != "" {
			return identity(dst, v, header)
		}
		return dst, fmt.Errorf("%w: no %s header", ErrNoKey, header)
	}
}

// UserAgent keys by a fingerprint of User-Agent, Accept-Language and
// Accept-Encoding, hashed (64-bit FNV-1a): coarse, since many clients share
// a browser, but it tells scripted clients from each other without a login.
func UserAgent() KeyFunc {
	return func(dst []byte, r *http.Request, _ *Policy) ([]byte, error) {
		h := fnv.New64a()
		for _, name := range [...]string{"User-Agent", "Accept-Language", "Accept-Encoding"} {
			h.Write([]byte(r.Header.Get(name)))
			h.Write([]byte{0})
		}
		return strconv.AppendUint(append(dst, "ua:"...), h.Sum64(), 36), nil
	}
}

// Route keys by the policy's route pattern, so that a limit is shared by
// everyone on that route; compose it with another key for per-client
// per-route limits.
func Route() KeyFunc {
	return func(dst []byte, _ *http.Request, p *Policy) ([]byte, error) {
		return append(dst, p.Pattern...), nil
	}
}

// Compose keys by several identities at once, such as (API key, route):
// the request is limited per combination. Parts are joined with a NUL
// byte, which no header value can hold; a part that holds one anyway (a
// user ID from the context, say) could name another combination's
// counter, and the request is answered 400 (ErrAmbiguousKey).
func Compose(keys ...KeyFunc) KeyFunc {
	return func(dst []byte, r *http.Request, p *Policy) ([]byte, error) {
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, 0)
			}
			start := len(dst)
			var err error
			if dst, err = k(dst, r, p); err != nil {
				return dst, err
			}
			if bytes.IndexByte(dst[start:], 0) >= 0 {
				return dst, ErrAmbiguousKey
			}
		}
		return dst, nil
	}
}

// ErrAmbiguousKey is returned by Compose for a part that holds a NUL byte,
// the separator of the parts; the middleware answers 400.
var ErrAmbiguousKey = errors.New("httplimit: a part of the request's key holds a NUL byte")
