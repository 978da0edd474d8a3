//go:build unix

package redistest

import "syscall"

// Pause stops the server's process (SIGSTOP): it keeps its connections
// and answers nothing, as a hung server does, until Resume. Unlike DEBUG
// SLEEP, the hang lasts as long as the test needs, however busy the
// machine.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT); it then answers what it
// was sent meanwhile.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Skip("redistest: cannot pause an external server")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v to redis-server: %v", sig, err)
	}
}
