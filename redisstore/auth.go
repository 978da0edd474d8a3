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

// useCredentialFiles makes opt authenticate to Redis with the password in
// passwordFile, and to its sentinels with the one in sentinelFile, each
// read at Open and again at each new connection, so that a password
// rotated on disk (a Kubernetes Secret mounted as a file, say) is used
// without a restart: Redis keeps the connections authenticated before, and
// new ones need the new password once the old one is removed (ACL SETUSER
// name >new, then <old). A file that cannot be read then leaves the last
// password read in use (rotated.File); files gets each one opened. An
// empty path leaves that password the URL's. rueidis gives every
// connection, the sentinels' included, the same credentials function:
// with Sentinel it tells the sentinels' connections apart
// (markSentinelConns) and answers them with their own credentials.
func useCredentialFiles(opt *rueidis.ClientOption, passwordFile, sentinelFile string, log *slog.Logger, files *[]rotated.Counted) error {
	if passwordFile != "" && opt.Password != "" {
		return errors.New("redisstore: password_file and a password in the URL: give one")
	}
	if sentinelFile != "" && opt.Sentinel.Password != "" {
		return errors.New("redisstore: sentinel_password_file and sentinel_password: give one")
	}
	redis, err := credentials(opt.Username, opt.Password, passwordFile, "redis password_file", log, files)
	if err != nil {
		return err
	}
	sentinel, err := credentials(opt.Sentinel.Username, opt.Sentinel.Password, sentinelFile, "redis sentinel_password_file", log, files)
	if err != nil {
		return err
	}
	opt.AuthCredentialsFn = func(c rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
		if _, ok := c.Address.(sentinelAddr); ok {
			return sentinel(), nil
		}
		return redis(), nil
	}
	if opt.Sentinel.MasterSet != "" {
		markSentinelConns(opt)
	}
	return nil
}

// credentials returns user and password, or user and the password in
// path (named what in its errors and log lines) when path is set.
func credentials(user, password, path, what string, log *slog.Logger, files *[]rotated.Counted) (func() rueidis.AuthCredentials, error) {
	if path == "" {
		return func() rueidis.AuthCredentials { return rueidis.AuthCredentials{Username: user, Password: password} }, nil
	}
	f, err := rotated.Open(path, what, rotated.Text, log)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	*files = append(*files, f)
	return func() rueidis.AuthCredentials {
		password, _ := f.Read() // a failure is logged, and the last password stays
		return rueidis.AuthCredentials{Username: user, Password: password}
	}, nil
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
