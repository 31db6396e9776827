package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// runCompletion prints a completion script for bash or zsh: the commands,
// and each command's flags, taken from the FlagSets themselves so that the
// script never drifts from the flags.
func runCompletion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		writeHelp(stdout, "completion")
		return exitAccepted
	}
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		fmt.Fprintf(stderr, "cpilab completion: want one shell, bash or zsh, got %q\nRun 'cpilab completion --help' for usage.\n", args)
		return exitUsage
	}
	names := commandNames()
	flags := map[string][]string{}
	for _, n := range names {
		if n == "completion" {
			flags[n] = []string{"bash", "zsh"}
			continue
		}
		if fs := flagSetOf(n); fs != nil {
			fs.VisitAll(func(f *flag.Flag) { flags[n] = append(flags[n], "--"+f.Name) })
		}
	}
	if args[0] == "bash" {
		writeBashCompletion(stdout, names, flags)
	} else {
		writeZshCompletion(stdout, names, flags)
	}
	return exitAccepted
}

func writeBashCompletion(w io.Writer, names []string, flags map[string][]string) {
	fmt.Fprintf(w, `# bash completion for cpilab: source <(cpilab completion bash)
_cpilab() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W %q -- "$cur"))
        return
    fi
    case "$cmd" in
`, strings.Join(append(names, "help", "--help", "--version"), " "))
	for _, n := range names {
		fmt.Fprintf(w, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", n, strings.Join(flags[n], " "))
	}
	fmt.Fprint(w, `    help) COMPREPLY=($(compgen -W "`+strings.Join(names, " ")+`" -- "$cur")) ;;
    esac
    # a flag's value: fall back to file names
    if [ ${#COMPREPLY[@]} -eq 0 ]; then COMPREPLY=($(compgen -f -- "$cur")); fi
}
complete -o filenames -F _cpilab cpilab
`)
}

func writeZshCompletion(w io.Writer, names []string, flags map[string][]string) {
	fmt.Fprintf(w, `#compdef cpilab
# zsh completion for cpilab: cpilab completion zsh > "${fpath[1]}/_cpilab"
_cpilab() {
    if (( CURRENT == 2 )); then
        compadd -- %s help --help --version
        return
    fi
    case "$words[2]" in
`, strings.Join(names, " "))
	for _, n := range names {
		fmt.Fprintf(w, "    %s) compadd -- %s; _files ;;\n", n, strings.Join(flags[n], " "))
	}
	fmt.Fprint(w, `    help) compadd -- `+strings.Join(names, " ")+` ;;
    esac
}
compdef _cpilab cpilab
`)
}
