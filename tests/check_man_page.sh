#!/usr/bin/env bash
# The man page says what the tool does: every option any `--help` lists is in
# docs/distlock.1 and every option the page names is one the tool takes, every
# exit status of `distlock --help` has its entry, the version is the tool's,
# and groff renders the page without a warning.
#   check_man_page.sh path/to/distlock docs/distlock.1
set -euo pipefail
tool=$1
page=$2
status=0
fail() { echo "man page: $*" >&2; status=1; }

helped=$(for command in "" run status release wait; do
  # shellcheck disable=SC2086 # no command: the top-level help
  "$tool" $command --help
done)
from_help=$(grep -oE '^  (-[a-z],)?--[a-z][a-z0-9-]*' <<<"$helped" | sed -E 's/^  (-[a-z],)?//' |
  sort -u)
from_page=$(sed 's/\\-/-/g' "$page" | grep -oE -- '--[a-z][a-z0-9-]*[a-z0-9]' | sort -u)
for option in $from_help; do
  grep -qxF -- "$option" <<<"$from_page" || fail "$option is in --help but not in $page"
done
for option in $from_page; do
  grep -qxF -- "$option" <<<"$from_help" || fail "$option is in $page but no --help lists it"
done

for code in $(sed -n '/^Exit status:/,$p' <<<"$("$tool" --help)" | grep -oE '^  [0-9][0-9.+N]*'); do
  grep -qxF ".B $code" "$page" || fail "exit status $code has no entry"
done

version=$("$tool" --version)
grep -q "^\.TH DISTLOCK 1 \"[^\"]*\" \"$version\"" "$page" || fail "the .TH line does not say $version"

warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
[ -z "$warnings" ] || fail "groff warns: $warnings"
exit $status
