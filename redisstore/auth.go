package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/rotated"
)

// usePasswordFile makes opt authenticate as its user with the password in
// path, read now and again at each new connection, so that a password
// rotated on disk (a Kubernetes Secret mounted as a file, say) is used
// without a restart: Redis keeps the connections authenticated before,
// and new ones need the new password once the old one is removed (ACL
// SETUSER name >new, then <old). A file that cannot be read then leaves
// the last password read in use (rotated.File); files gets it. With
// Sentinel the file is the master's and replicas' password: rueidis gives
// the sentinels' connections the same credentials function, which answers
// them with the URL's sentinel_username and sentinel_password instead
// (markSentinelConns tells their connections apart).
func usePasswordFile(opt *rueidis.ClientOption, path string, log *slog.Logger, files *[]rotated.Counted) error {
	if opt.Password != "" {
		return errors.New("redisstore: password_file and a password in the URL: give one")
	}
	f, err := rotated.Open(path, "redis password_file", rotated.Text, log)
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	*files = append(*files, f)
	user := opt.Username
	sentinel := rueidis.AuthCredentials{Username: opt.Sentinel.Username, Password: opt.Sentinel.Password}
	opt.AuthCredentialsFn = func(c rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
		if _, ok := c.Address.(sentinelAddr); ok {
			return sentinel, nil
		}
		password, _ := f.Read() // a failure is logged, and the last password stays
		return rueidis.AuthCredentials{Username: user, Password: password}, nil
	}
	return nil
}

// markSentinelConns makes the connections opt dials to its sentinels say
// so in their RemoteAddr (a sentinelAddr), where AuthCredentialsFn sees
// it. rueidis dials a sentinel with Sentinel.Dialer and Redis with
// Dialer, through the same DialCtxFn: the sentinels' dialer is Redis's
// with a Control hook that does nothing, and the dial function it
// reaches marks the connection.
func markSentinelConns(opt *rueidis.ClientOption) {
	opt.Sentinel.Dialer = opt.Dialer
	opt.Sentinel.Dialer.Control = func(string, string, syscall.RawConn) error { return nil }
	dial := opt.DialCtxFn
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		conn, err := dialVia(ctx, dial, dst, d, cfg)
		if err != nil || d.Control == nil {
			return conn, err
		}
		return sentinelConn{conn}, nil
	}
}

// sentinelConn is a connection to a sentinel.
type sentinelConn struct{ net.Conn }

func (c sentinelConn) RemoteAddr() net.Addr { return sentinelAddr{c.Conn.RemoteAddr()} }

// sentinelAddr is a sentinel's address.
type sentinelAddr struct{ net.Addr }
