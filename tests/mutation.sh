#!/usr/bin/env bash
# Mutation testing (not part of CI: the whole list takes hours on 2 cores, one module's globs minutes): mutmut makes
# small deliberate bugs, one at a time, in the modules the dashboard's numbers and the safety rules live in
# ([tool.mutmut] in pyproject.toml lists them and the fast unit tests that judge each mutant), and counts how many
# the tests catch ("killed").
#   ./tests/mutation.sh                 # everything listed, 2 workers; writes mutants/ (git-ignored)
#   ./tests/mutation.sh 'llmhost.stats*' # only some mutants (mutmut's name globs)
# Then: .venv/bin/mutmut results (survivors), .venv/bin/mutmut show NAME (a survivor's diff).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG_PREFIX=mutation
# shellcheck source=lib.sh
source lib.sh

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  print_usage "${BASH_SOURCE[0]}"
  exit 0
fi
[[ -x .venv/bin/mutmut ]] || die "mutmut is not in .venv — run: .venv/bin/pip install -e '.[test]'"
rm -rf mutants  # a stale copy would judge old code
# .venv first on PATH: the config tests run lib.sh, whose python3 must import the mutated package (and mutmut)
PATH="$PWD/.venv/bin:$PATH" .venv/bin/mutmut run --max-children "${MUTATION_WORKERS:-2}" "$@"
.venv/bin/python tests/mutation_score.py mutants
