#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks (or, with --fix, rewrites) the formatting of every C, C++ and CUDA file git tracks
# under src/ include/ tests/ python/src/ dev/ tools/ against the repository's .clang-format.
# Fails listing the files that differ, with the command that formats them.
#
#   tools/check_format.sh           # `make format-check`
#   tools/check_format.sh --fix     # `make format`
#
# CLANG_FORMAT names the binary (default: clang-format-14, else clang-format): the version is
# pinned because clang-format's output changes between releases.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: tools/check_format.sh [--fix]" >&2; exit 2 ;;
esac
CLANG_FORMAT=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$CLANG_FORMAT" ]; then
  echo "check_format: clang-format-14 not found (apt-get install clang-format-14)" >&2
  exit 2
fi

files=()
while IFS= read -r -d '' file; do
  files+=("$file")
done < <(git ls-files -z -- src include tests python/src dev tools |
  grep -zE '\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh)$' || true)
if [ "${#files[@]}" = 0 ]; then
  echo "check_format: no C/C++/CUDA files tracked under the checked folders" >&2
  exit 2
fi

if [ "$fix" = 1 ]; then
  "$CLANG_FORMAT" -i --style=file "${files[@]}"
  echo "check_format: formatted ${#files[@]} files with $("$CLANG_FORMAT" --version)"
  exit 0
fi

unformatted=()
for file in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --style=file --dry-run --Werror "$file" >/dev/null 2>&1; then
    unformatted+=("$file")
  fi
done
if [ "${#unformatted[@]}" != 0 ]; then
  echo "check_format: ${#unformatted[@]} of ${#files[@]} files differ from .clang-format" \
    "($("$CLANG_FORMAT" --version)):"
  printf '  %s\n' "${unformatted[@]}"
  echo "format them with: make format (or $CLANG_FORMAT -i FILE)"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
