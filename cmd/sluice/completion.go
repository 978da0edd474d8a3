package main

import (
	"fmt"
	"io"
	"strings"
)

// commands and their flags, for shell completion.
var completionWords = map[string][]string{
	"serve":  {"-config", "-redis", "-store", "-log-level", "-log-format", "-http", "-grpc", "-admin", "-admin-token", "-admin-token-file", "-envoy-env", "-shutdown-timeout", "-peer-listen", "-tls-cert", "-tls-key", "-tls-client-ca"},
	"proxy":  {"-config", "-redis", "-store", "-log-level", "-log-format", "-listen", "-upstream", "-metrics", "-admin", "-admin-token", "-admin-token-file", "-shutdown-timeout", "-tls-cert", "-tls-key", "-tls-client-ca"},
	"check":  {"-addr", "-policy", "-key", "-cost", "-plan", "-domain", "-descriptor"},
	"sim":    {"-algorithms", "-limit", "-traffic", "-duration", "-rate", "-clients", "-requests", "-zipf-s", "-seed", "-trace", "-plot", "-bin", "-subwindows", "-sources", "-over"},
	"config": {"validate", "defaults"},
}

var commandNames = []string{"serve", "proxy", "check", "sim", "config", "version", "completion"}

// completion prints a completion script for bash or zsh:
//
//	source <(sluice completion bash)
func completion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, "usage: sluice completion bash|zsh\n\nPrints a completion script: source <(sluice completion bash), or for zsh add it to your fpath.")
		return 0
	}
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		fmt.Fprintln(stderr, "usage: sluice completion bash|zsh")
		return 2
	}
	var cases strings.Builder
	for _, c := range []string{"serve", "proxy", "check", "sim", "config"} {
		fmt.Fprintf(&cases, "    %s) words=%q ;;\n", c, strings.Join(completionWords[c], " "))
	}
	bash := fmt.Sprintf(`# sluice completion for bash: source <(sluice completion bash)
_sluice() {
  local cur=${COMP_WORDS[COMP_CWORD]} words
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
    return
  fi
  case ${COMP_WORDS[1]} in
%s    completion) words="bash zsh" ;;
    *) words="" ;;
  esac
  COMPREPLY=($(compgen -W "$words" -f -- "$cur"))
}
complete -F _sluice sluice
`, strings.Join(commandNames, " "), cases.String())
	if args[0] == "zsh" {
		fmt.Fprintf(stdout, "#compdef sluice\n# sluice completion for zsh: the bash script through bashcompinit.\nautoload -U +X bashcompinit && bashcompinit\n%s", bash)
		return 0
	}
	fmt.Fprint(stdout, bash)
	return 0
}
