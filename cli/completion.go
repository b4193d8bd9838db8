package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"
)

// The scripts are urfave/cli's own (autocomplete/ in its repository) with
// the program name filled in: the shell asks `cnibox ... --generate-bash-completion`
// for the words that may come next.
const bashCompletion = `# bash completion for cnibox: source <(cnibox completion bash)
_cnibox_bash_autocomplete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts base words cword
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      COMPREPLY=()
      _get_comp_words_by_ref -n "=:" cur prev words cword
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      requestComp="${words[*]} ${cur} --generate-bash-completion"
    else
      requestComp="${words[*]} --generate-bash-completion"
    fi
    opts=$(eval "${requestComp}" 2>/dev/null)
    COMPREPLY=($(compgen -W "${opts}" -- ${cur}))
    return 0
  fi
}
complete -o bashdefault -o default -o nospace -F _cnibox_bash_autocomplete cnibox
`

const zshCompletion = `#compdef cnibox
# zsh completion for cnibox: source <(cnibox completion zsh)
_cnibox_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _cnibox_zsh_autocomplete cnibox
`

// completeShells is what `cnibox completion <TAB>` offers.
func completeShells(c *ucli.Context) {
	fmt.Fprintln(c.App.Writer, "bash")
	fmt.Fprintln(c.App.Writer, "zsh")
}

// printCompletion is `cnibox completion bash|zsh`.
func printCompletion(c *ucli.Context) error {
	switch c.Args().First() {
	case "bash":
		_, err := fmt.Fprint(c.App.Writer, bashCompletion)
		return err
	case "zsh":
		_, err := fmt.Fprint(c.App.Writer, zshCompletion)
		return err
	}
	return fmt.Errorf("completion: name the shell: cnibox completion bash, or cnibox completion zsh")
}
